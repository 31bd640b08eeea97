/*-------------------------------------------------------------------------
 *
 * tls.c
 *		TLS under the Redis client's connections (seckill.redis_tls), with
 *		OpenSSL on the connections' own non-blocking sockets.
 *
 * hiredis 0.14 speaks plain TCP only, but its parts serve: its reply reader
 * is fed with what SSL_read decrypts (redisReaderFeed), and its output
 * buffer, where the commands are appended as ever, is written with
 * SSL_write.  The handshake runs once the TCP connection is up, within the
 * connection's deadline and cancellable; it checks the server's certificate
 * against seckill.redis_tls_ca_file (else the system's CAs) and its name
 * against seckill.redis_tls_server_name (else the host connected to), and
 * presents a client certificate when one is set.  A connection that fails
 * it is closed like any other that fails, so the reconnect backoff holds.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/tls.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <hiredis/sds.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"

/* The TLS sessions, by the socket of their connection. */
#define MAX_SESSIONS 64
typedef struct Session
{
	int			fd;
	SSL		   *ssl;
} Session;

static Session sessions[MAX_SESSIONS];
static int	nsessions = 0;

static SSL *
session_of(redisContext *ctx)
{
	for (int i = 0; i < nsessions; i++)
		if (sessions[i].fd == ctx->fd)
			return sessions[i].ssl;
	return NULL;
}

/* OpenSSL's queued errors as one line (the last first), then cleared. */
static const char *
openssl_errors(void)
{
	static char buf[256];
	unsigned long e;

	buf[0] = '\0';
	while ((e = ERR_get_error()) != 0)
		if (buf[0] == '\0')
			ERR_error_string_n(e, buf, sizeof(buf));
	return buf[0] != '\0' ? buf : "no detail from OpenSSL";
}

/*
 * OpenSSL asks for a passphrase when the key file is encrypted: the worker
 * has no terminal, so none is given (OpenSSL would prompt on the server's
 * and block), and the load fails, said so.
 */
static bool passphrase_asked = false;

static int
no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
	passphrase_asked = true;
	return 0;
}

/* Is the key file readable by its owner only, as the password file must be? */
static bool
key_file_private(char *error, size_t errorlen)
{
	struct stat st;

	if (stat(seckill_redis_tls_key_file, &st) != 0)
	{
		snprintf(error, errorlen, "could not read seckill.redis_tls_key_file: %m");
		return false;
	}
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		snprintf(error, errorlen, "the file named by seckill.redis_tls_key_file must be readable by its owner only (chmod 600)");
		return false;
	}
	return true;
}

/* The wait for the socket in the direction OpenSSL asked, within seckill.redis_timeout. */
static bool
wait_as_asked(redisContext *ctx, bool write)
{
	return sk_tls_wait(ctx->fd, write,
					   TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout));
}

static void
set_ctx_error(redisContext *ctx, int type, const char *message)
{
	ctx->err = type;
	strlcpy(ctx->errstr, message, sizeof(ctx->errstr));
}

/*
 * A context made from the settings and files as they are now, for one
 * handshake (a connection is rare: a CA file or certificate replaced on
 * disk is taken up at the next one); NULL with the error written when they
 * are unusable.
 */
static SSL_CTX *
make_context(char *error, size_t errorlen)
{
	SSL_CTX    *made = SSL_CTX_new(TLS_client_method());

	if (made == NULL)
	{
		snprintf(error, errorlen, "could not make a TLS context: %s", openssl_errors());
		return NULL;
	}
	SSL_CTX_set_min_proto_version(made, TLS1_2_VERSION);
	SSL_CTX_set_verify(made, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(made, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_default_passwd_cb(made, no_passphrase);
	passphrase_asked = false;
	ERR_clear_error();
	if (seckill_redis_tls_ca_file[0] != '\0' ?
		SSL_CTX_load_verify_locations(made, seckill_redis_tls_ca_file, NULL) != 1 :
		SSL_CTX_set_default_verify_paths(made) != 1)
		snprintf(error, errorlen, "could not load the CA certificates of %s: %s",
				 seckill_redis_tls_ca_file[0] != '\0' ? "seckill.redis_tls_ca_file" : "the system",
				 openssl_errors());
	else if ((seckill_redis_tls_cert_file[0] != '\0') != (seckill_redis_tls_key_file[0] != '\0'))
		snprintf(error, errorlen, "seckill.redis_tls_cert_file and seckill.redis_tls_key_file go together: set both or neither");
	else if (seckill_redis_tls_key_file[0] != '\0' && !key_file_private(error, errorlen))
		;						/* said why */
	else if (seckill_redis_tls_cert_file[0] != '\0' &&
			 (SSL_CTX_use_certificate_chain_file(made, seckill_redis_tls_cert_file) != 1 ||
			  SSL_CTX_use_PrivateKey_file(made, seckill_redis_tls_key_file, SSL_FILETYPE_PEM) != 1 ||
			  SSL_CTX_check_private_key(made) != 1))
		snprintf(error, errorlen, passphrase_asked ?
				 "seckill.redis_tls_key_file is encrypted, and the worker cannot ask for its passphrase: give it the key unencrypted (openssl pkey -in KEY -out KEY.plain), readable by the server's user only (%s)" :
				 "could not load the client certificate and key (seckill.redis_tls_cert_file, seckill.redis_tls_key_file): %s",
				 openssl_errors());
	else
		return made;
	SSL_CTX_free(made);
	return NULL;
}

/*
 * Wait for the socket to turn writable (write) or readable, until the
 * deadline; interrupts are served, and the latch is set again on the way
 * out if it was set meanwhile.  False at the deadline.
 */
bool
sk_tls_wait(int fd, bool write, TimestampTz deadline)
{
	bool		woken = false;
	bool		ready = false;

	for (;;)
	{
		long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		int			rc;

		if (ms <= 0)
			break;
		rc = WaitLatchOrSocket(MyLatch,
							   WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH |
							   (write ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE),
							   fd, ms, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			woken = true;
		}
		if (rc & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE))
		{
			ready = true;
			break;
		}
	}
	/* a wake-up meant for the worker's loop is kept for it */
	if (woken)
		SetLatch(MyLatch);
	return ready;
}

/*
 * The TLS handshake on a connection whose TCP connect was made (it may
 * still be under way): true once the server's certificate and name check
 * out; false with the error written otherwise (the caller closes the
 * connection with sk_tls_free).
 */
bool
sk_tls_start(redisContext *ctx, const char *host, int port, TimestampTz deadline,
			 char *error, size_t errorlen)
{
	const char *name = seckill_redis_tls_server_name[0] != '\0' ? seckill_redis_tls_server_name : host;
	unsigned char ip[16];
	SSL_CTX    *made;
	SSL		   *ssl;

	if (nsessions == MAX_SESSIONS)
	{
		snprintf(error, errorlen, "more than %d TLS connections to Redis", MAX_SESSIONS);
		return false;
	}
	if ((made = make_context(error, errorlen)) == NULL)
		return false;
	ssl = SSL_new(made);
	SSL_CTX_free(made);			/* the session holds it */
	if (ssl == NULL || SSL_set_fd(ssl, ctx->fd) != 1)
	{
		snprintf(error, errorlen, "could not start TLS: %s", openssl_errors());
		if (ssl)
			SSL_free(ssl);
		return false;
	}
	/* kept at once, so that a cancel in the wait below frees it with the connection */
	sessions[nsessions].fd = ctx->fd;
	sessions[nsessions++].ssl = ssl;

	/* the name the certificate must carry: an address, or a host name (also sent as SNI) */
	if (inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1)
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name);
	else
	{
		SSL_set_tlsext_host_name(ssl, name);
		SSL_set1_host(ssl, name);
	}
	for (;;)
	{
		int			rc;
		int			e;

		ERR_clear_error();
		rc = SSL_connect(ssl);
		if (rc == 1)
			return true;
		e = SSL_get_error(ssl, rc);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		{
			if (sk_tls_wait(ctx->fd, e == SSL_ERROR_WANT_WRITE, deadline))
				continue;
			snprintf(error, errorlen, "the TLS handshake with Redis at %s:%d got no answer within seckill.redis_timeout (%d ms): is it a TLS port?",
					 host, port, seckill_redis_timeout);
			return false;
		}
		if (SSL_get_verify_result(ssl) != X509_V_OK)
			snprintf(error, errorlen, "the certificate of Redis at %s:%d was refused: %s (checked against %s, for the name \"%s\")",
					 host, port, X509_verify_cert_error_string(SSL_get_verify_result(ssl)),
					 seckill_redis_tls_ca_file[0] != '\0' ? "seckill.redis_tls_ca_file" : "the system's CAs", name);
		else
			snprintf(error, errorlen, "the TLS handshake with Redis at %s:%d failed: %s: is it a TLS port?",
					 host, port, e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 ?
					 "the connection was closed" : openssl_errors());
		return false;
	}
}

/* As redisBufferRead: all that the socket holds, decrypted into the reader. */
int
sk_tls_read(redisContext *ctx)
{
	SSL		   *ssl = session_of(ctx);
	char		buf[16 * 1024];

	if (ssl == NULL)
		return redisBufferRead(ctx);
	for (;;)
	{
		int			n;
		int			e;

		ERR_clear_error();
		n = SSL_read(ssl, buf, sizeof(buf));
		if (n > 0)
		{
			if (redisReaderFeed(ctx->reader, buf, n) != REDIS_OK)
			{
				set_ctx_error(ctx, ctx->reader->err, ctx->reader->errstr);
				return REDIS_ERR;
			}
			continue;
		}
		e = SSL_get_error(ssl, n);
		if (e == SSL_ERROR_WANT_READ)
			return REDIS_OK;
		/* a read that must write first (a renegotiation): waited for here */
		if (e == SSL_ERROR_WANT_WRITE && wait_as_asked(ctx, true))
			continue;
		set_ctx_error(ctx, e == SSL_ERROR_ZERO_RETURN ? REDIS_ERR_EOF : REDIS_ERR_IO,
					  e == SSL_ERROR_ZERO_RETURN ? "Server closed the connection" :
					  psprintf("TLS read failed: %s", openssl_errors()));
		return REDIS_ERR;
	}
}

/* As redisBufferWrite: as much of the output buffer as the socket takes. */
int
sk_tls_write(redisContext *ctx, int *done)
{
	SSL		   *ssl = session_of(ctx);

	if (ssl == NULL)
		return redisBufferWrite(ctx, done);
	while (sdslen(ctx->obuf) > 0)
	{
		int			n;
		int			e;

		ERR_clear_error();
		n = SSL_write(ssl, ctx->obuf, sdslen(ctx->obuf));
		if (n > 0)
		{
			sdsrange(ctx->obuf, n, -1);
			continue;
		}
		e = SSL_get_error(ssl, n);
		if (e == SSL_ERROR_WANT_WRITE)
			break;
		/* a write that must read first (a renegotiation): waited for here */
		if (e == SSL_ERROR_WANT_READ && wait_as_asked(ctx, false))
			continue;
		set_ctx_error(ctx, REDIS_ERR_IO, psprintf("TLS write failed: %s", openssl_errors()));
		return REDIS_ERR;
	}
	if (done)
		*done = sdslen(ctx->obuf) == 0;
	return REDIS_OK;
}

/*
 * Write a command that holds a secret (AUTH) straight to the connection by
 * the deadline, past hiredis' output buffer: hiredis frees and reallocates
 * that buffer without clearing it, and formats a command in a copy it frees
 * the same way, so the secret would stay in freed memory.  The caller clears
 * buf.  Only with the output buffer empty.  False, with ctx->errstr set,
 * when it failed.
 */
bool
sk_tls_write_secret(redisContext *ctx, const char *buf, size_t len, TimestampTz deadline)
{
	SSL		   *ssl = session_of(ctx);
	size_t		off = 0;

	Assert(sdslen(ctx->obuf) == 0);
	while (off < len)
	{
		ssize_t		n;
		bool		for_write = true;

		if (ssl != NULL)
		{
			int			e;

			ERR_clear_error();
			n = SSL_write(ssl, buf + off, (int) (len - off));
			if (n > 0)
			{
				off += n;
				continue;
			}
			e = SSL_get_error(ssl, (int) n);
			if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ)
			{
				set_ctx_error(ctx, REDIS_ERR_IO, psprintf("TLS write failed: %s", openssl_errors()));
				return false;
			}
			for_write = e == SSL_ERROR_WANT_WRITE;
		}
		else
		{
			n = write(ctx->fd, buf + off, len - off);
			if (n > 0)
			{
				off += n;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			{
				set_ctx_error(ctx, REDIS_ERR_IO, n == 0 ? "write failed" : strerror(errno));
				return false;
			}
		}
		if (!sk_tls_wait(ctx->fd, for_write, deadline))
		{
			set_ctx_error(ctx, REDIS_ERR_IO, "timed out");
			return false;
		}
	}
	return true;
}

/*
 * Send AUTH with the password (as user, when one is given) on the
 * connection, past hiredis' buffers (sk_tls_write_secret), and clear the
 * copy made here.  The caller reads the reply.
 */
bool
sk_tls_write_auth(redisContext *ctx, const char *user, const char *password, TimestampTz deadline)
{
	StringInfoData buf;
	bool		as_user = user != NULL && user[0] != '\0';
	bool		ok;

	initStringInfo(&buf);
	/* room for all at once: a buffer that grows leaves the old one uncleared */
	enlargeStringInfo(&buf, 64 + strlen(password) + (as_user ? strlen(user) : 0));
	appendStringInfo(&buf, "*%d\r\n$4\r\nAUTH\r\n", as_user ? 3 : 2);
	if (as_user)
		appendStringInfo(&buf, "$%zu\r\n%s\r\n", strlen(user), user);
	appendStringInfo(&buf, "$%zu\r\n%s\r\n", strlen(password), password);
	/* no cancel between the copy and its clearing (the deadline bounds it) */
	HOLD_INTERRUPTS();
	ok = sk_tls_write_secret(ctx, buf.data, buf.len, deadline);
	RESUME_INTERRUPTS();
	memset(buf.data, 0, buf.len);
	pfree(buf.data);
	return ok;
}

/* As redisFree, ending the connection's TLS session first. */
void
sk_tls_free(redisContext *ctx)
{
	if (ctx == NULL)
		return;
	for (int i = 0; i < nsessions; i++)
		if (sessions[i].fd == ctx->fd)
		{
			SSL_free(sessions[i].ssl);
			sessions[i] = sessions[--nsessions];
			break;
		}
	redisFree(ctx);
}
