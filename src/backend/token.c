/*-------------------------------------------------------------------------
 *
 * token.c
 *		One-time purchase tokens.
 *
 * A token is "<expiry>-<nonce>-<mac>": its expiry in microseconds since the
 * Unix epoch (hex), a random 64-bit nonce (16 hex digits), and 128 bits of
 * HMAC-SHA256 over "<campaign id>:<expiry>:<nonce>:<user id>" keyed with
 * the campaign's secret (seckill.token_secrets).  Issuing one
 * costs no round trip.  seckill_buy checks the MAC and the expiry, so a
 * forged, altered or another user's token never reaches Redis; the purchase
 * script spends the nonce atomically with the purchase and checks the
 * expiry again by Redis' clock.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/token.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "backend/backend.h"
#include "common/sha2.h"
#include "shared/campaign_cache.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_token);

#define MAC_LEN 16				/* bytes of the HMAC kept */

/*
 * HMAC-SHA256 keyed with a campaign's secret, kept by the session for the
 * last few campaigns it issued or checked tokens of: keying a MAC (finding
 * the digest by name, hashing the key blocks) cost more than the MAC of a
 * token itself.  An entry is keyed again when its campaign's secret changes.
 */
#define KEYED_MACS 4

typedef struct KeyedMac
{
	int64		campaign_id;
	uint8		secret[SK_TOKEN_SECRET_LEN];
	EVP_MAC_CTX *ctx;			/* NULL: unused */
} KeyedMac;

static EVP_MAC *hmac = NULL;
static KeyedMac keyed[KEYED_MACS];
static int	next_keyed = 0;

static void
mac_failed(void)
{
	unsigned long e = ERR_get_error();

	ERR_clear_error();
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("could not compute a token's HMAC: %s",
					e != 0 && ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "OpenSSL gave no reason")));
}

static EVP_MAC_CTX *
keyed_mac(int64 campaign_id, const uint8 *secret)
{
	OSSL_PARAM	params[2];
	KeyedMac   *k;

	for (int i = 0; i < KEYED_MACS; i++)
		if (keyed[i].ctx != NULL && keyed[i].campaign_id == campaign_id &&
			memcmp(keyed[i].secret, secret, SK_TOKEN_SECRET_LEN) == 0)
			return keyed[i].ctx;
	if (hmac == NULL && (hmac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL)) == NULL)
		mac_failed();
	k = &keyed[next_keyed];
	next_keyed = (next_keyed + 1) % KEYED_MACS;
	EVP_MAC_CTX_free(k->ctx);
	k->ctx = EVP_MAC_CTX_new(hmac);
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	if (k->ctx == NULL || !EVP_MAC_init(k->ctx, secret, SK_TOKEN_SECRET_LEN, params))
	{
		EVP_MAC_CTX_free(k->ctx);
		k->ctx = NULL;
		mac_failed();
	}
	k->campaign_id = campaign_id;
	memcpy(k->secret, secret, SK_TOKEN_SECRET_LEN);
	return k->ctx;
}

static void
token_mac(int64 campaign_id, const SeckillLimits *limits, const char *user_id,
		  int64 expiry, const char *nonce, uint8 *mac)
{
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	size_t		len;
	char	   *msg = psprintf(INT64_FORMAT ":" INT64_FORMAT ":%s:%s",
							   campaign_id, expiry, nonce, user_id);
	EVP_MAC_CTX *ctx;

	if (!limits->has_token_secret)
		elog(ERROR, "the token secret of campaign " INT64_FORMAT " is not loaded", campaign_id);
	ctx = keyed_mac(campaign_id, limits->token_secret);
	/* a NULL key starts a MAC over with the key the context holds */
	if (!EVP_MAC_init(ctx, NULL, 0, NULL) ||
		!EVP_MAC_update(ctx, (const unsigned char *) msg, strlen(msg)) ||
		!EVP_MAC_final(ctx, digest, &len, sizeof(digest)) || len != sizeof(digest))
		mac_failed();
	memcpy(mac, digest, MAC_LEN);
}

static void
to_hex(const uint8 *bytes, int n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < n; i++)
	{
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

/*
 * Does token belong to this user and campaign, and is it unexpired?  When
 * it does, its nonce (SK_NONCE_LEN + 1 bytes) and expiry are returned.
 */
bool
seckill_token_verify(int64 campaign_id, const SeckillLimits *limits,
					 const char *user_id, const char *token,
					 char *nonce, int64 *expiry)
{
	char	   *end;
	const char *dash;
	uint8		mac[MAC_LEN];
	char		mac_hex[2 * MAC_LEN + 1];
	uint64		exp;

	/* strictly "<hex>-<16 hex>-<32 hex>": one spelling per token */
	if (strspn(token, "0123456789abcdef") == 0)
		return false;
	exp = strtoull(token, &end, 16);
	if (end != token + strspn(token, "0123456789abcdef") || *end != '-' || exp > PG_INT64_MAX)
		return false;
	dash = end + 1 + SK_NONCE_LEN;
	if (strlen(end + 1) != SK_NONCE_LEN + 1 + 2 * MAC_LEN || *dash != '-' ||
		strspn(end + 1, "0123456789abcdef") != SK_NONCE_LEN)
		return false;
	memcpy(nonce, end + 1, SK_NONCE_LEN);
	nonce[SK_NONCE_LEN] = '\0';
	token_mac(campaign_id, limits, user_id, (int64) exp, nonce, mac);
	to_hex(mac, MAC_LEN, mac_hex);
	if (timingsafe_bcmp(mac_hex, dash + 1, 2 * MAC_LEN) != 0)
		return false;
	if ((int64) exp <= seckill_unix_usec(GetCurrentTimestamp()))
		return false;
	*expiry = (int64) exp;
	return true;
}

/*
 * seckill_token(user_id text, goods text) RETURNS text: a one-time token for
 * one purchase of this user in the open campaign of goods, valid for the
 * campaign's token_ttl.
 */
Datum
seckill_token(PG_FUNCTION_ARGS)
{
	char	   *user_id = seckill_id_arg(fcinfo, 0, "user_id", SECKILL_MAX_USER_LEN);
	char	   *goods = seckill_id_arg(fcinfo, 1, "goods", SECKILL_MAX_GOODS_LEN);
	SeckillCampaign cached;
	SeckillCampaignRow info;
	uint8		random[SK_NONCE_LEN / 2];
	char		nonce[SK_NONCE_LEN + 1];
	uint8		mac[MAC_LEN];
	char		mac_hex[2 * MAC_LEN + 1];
	int64		expiry;

	seckill_check_database();
	if (seckill_campaign_lookup(goods, &cached))
		info = cached.row;
	else if (!store_campaign_by_goods(goods, &info) || strcmp(info.state, "closed") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("no open campaign for goods \"%s\"", goods),
				 errhint("Create one with seckill_campaign_create().")));
	else
		store_token_secret_load(info.id, &info.limits);
	if (!pg_strong_random(random, sizeof(random)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random token nonce")));
	to_hex(random, sizeof(random), nonce);
	expiry = seckill_unix_usec(GetCurrentTimestamp()) + info.limits.token_ttl;
	token_mac(info.id, &info.limits, user_id, expiry, nonce, mac);
	to_hex(mac, MAC_LEN, mac_hex);
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("%llx-%s-%s", (unsigned long long) expiry,
											  nonce, mac_hex)));
}
