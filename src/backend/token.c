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

#include "backend/backend.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "shared/campaign_cache.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_token);

#define MAC_LEN 16				/* bytes of the HMAC kept */

static void
token_mac(int64 campaign_id, const SeckillLimits *limits, const char *user_id,
		  int64 expiry, const char *nonce, uint8 *mac)
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	char	   *msg = psprintf(INT64_FORMAT ":" INT64_FORMAT ":%s:%s",
							   campaign_id, expiry, nonce, user_id);

	if (!limits->has_token_secret)
		elog(ERROR, "the token secret of campaign " INT64_FORMAT " is not loaded", campaign_id);
	if (ctx == NULL ||
		pg_hmac_init(ctx, limits->token_secret, SK_TOKEN_SECRET_LEN) < 0 ||
		pg_hmac_update(ctx, (uint8 *) msg, strlen(msg)) < 0 ||
		pg_hmac_final(ctx, digest, sizeof(digest)) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute a token's HMAC: %s",
						ctx ? pg_hmac_error(ctx) : "out of memory")));
	pg_hmac_free(ctx);
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
