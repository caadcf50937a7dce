#include <string.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/core_names.h>
#include <openssl/pkcs7.h>
#include <openssl/objects.h>
#include <openssl/sha.h>
#include <openssl/rsa.h>

/* SHA-256 through libcrypto's low-level functions, for the log's leaf, chain and Merkle hashes
   (LogHasher): millions of messages of 65 to 300 bytes, for which the EVP layer's context set-up on
   every message (an allocation and a provider call) costs more than the hashing itself. */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
static inline int ledger_sha256_init(SHA256_CTX *context) { return SHA256_Init(context); }
static inline int ledger_sha256_update(SHA256_CTX *context, const void *data, size_t length) {
    return SHA256_Update(context, data, length);
}
static inline int ledger_sha256_final(unsigned char *digest, SHA256_CTX *context) { return SHA256_Final(digest, context); }

/* SHA-256 of first || second (a log's leaf, chain or Merkle message, a few blocks long), padded here
   (FIPS 180-4, 5.1.1) and handed block by block to SHA256_Transform, libcrypto's block function (the
   same SHA-NI code SHA256_Update calls): no per-message buffering in SHA256_Update, nor padding and
   clean-up of the context in SHA256_Final. 1 on success, 0 when SHA256_Init fails. */
static inline void ledger_sha256_feed(SHA256_CTX *context, unsigned char *block, size_t *filled, const unsigned char *data,
                                      size_t length) {
    while (length > 0) {
        size_t take = 64 - *filled < length ? 64 - *filled : length;
        memcpy(block + *filled, data, take);
        *filled += take;
        data += take;
        length -= take;
        if (*filled == 64) {
            SHA256_Transform(context, block);
            *filled = 0;
        }
    }
}
static inline int ledger_sha256_two(const void *first, size_t firstLength, const void *second, size_t secondLength,
                                    unsigned char *digest) {
    SHA256_CTX context;
    if (SHA256_Init(&context) != 1) return 0;
    unsigned char block[64];
    size_t filled = 0;
    ledger_sha256_feed(&context, block, &filled, (const unsigned char *)first, firstLength);
    ledger_sha256_feed(&context, block, &filled, (const unsigned char *)second, secondLength);
    unsigned long long bits = ((unsigned long long)firstLength + (unsigned long long)secondLength) * 8;
    block[filled++] = 0x80;
    if (filled > 56) {
        memset(block + filled, 0, 64 - filled);
        SHA256_Transform(&context, block);
        filled = 0;
    }
    memset(block + filled, 0, 56 - filled);
    for (int index = 0; index < 8; index++) block[56 + index] = (unsigned char)(bits >> (56 - 8 * index));
    SHA256_Transform(&context, block);
    for (int word = 0; word < 8; word++) {
        for (int index = 0; index < 4; index++) digest[4 * word + index] = (unsigned char)(context.h[word] >> (24 - 8 * index));
    }
    return 1;
}

/* ES256 and RS256 verification with a key decoded once and kept (an Apple leaf of a cached chain, a
   Firebase certificate): the EVP layer's per-signature set-up (a digest context, an algorithm fetch
   under libcrypto's global lock, a context duplicated in EVP_DigestVerifyFinal, and for ES256 a DER
   round trip of the signature) costs a measurable share of each verification when many threads
   verify at once; underneath, EVP calls these same functions on the same key. Keys are only read,
   so any number of threads may verify with one. */
static inline EC_KEY *ledger_pkey_get1_ec_key(EVP_PKEY *key) { return EVP_PKEY_get1_EC_KEY(key); }
static inline void ledger_ec_key_free(EC_KEY *key) { EC_KEY_free(key); }
static inline int ledger_ecdsa_do_verify(const unsigned char *digest, int length, const ECDSA_SIG *signature, EC_KEY *key) {
    return ECDSA_do_verify(digest, length, signature, key);
}
static inline RSA *ledger_pkey_get1_rsa(EVP_PKEY *key) { return EVP_PKEY_get1_RSA(key); }
static inline void ledger_rsa_free(RSA *key) { RSA_free(key); }
static inline int ledger_rsa_verify_sha256(const unsigned char *digest, const unsigned char *signature, unsigned int length, RSA *key) {
    return RSA_verify(NID_sha256, digest, SHA256_DIGEST_LENGTH, signature, length, key);
}

/* ES256 with a key's multiples precomputed. ECDSA verification computes u1·G + u2·Q; libcrypto's
   P-256 code multiplies the curve's generator G with a precomputed table, but the public key Q as
   an arbitrary point, which is most of a verification's cost. For a key that verifies many
   signatures (the leaf of a cached Apple chain), a copy of the curve whose generator is Q, with its
   multiples precomputed (EC_GROUP_precompute_mult: tens of milliseconds, about 150 KB), makes u2·Q
   a fixed-base multiplication too. The copy is only read afterwards: any thread may use it. */
static inline EC_GROUP *ledger_ec_key_precompute(const EC_KEY *key) {
    const EC_GROUP *curve = EC_KEY_get0_group(key);
    const EC_POINT *q = EC_KEY_get0_public_key(key);
    /* P-256 only (ledger_ecdsa_verify_precomputed takes 32-byte digests and R, S): any other key
       keeps ECDSA_do_verify. */
    if (curve == NULL || q == NULL || EC_GROUP_get_curve_name(curve) != NID_X9_62_prime256v1) return NULL;
    EC_GROUP *group = EC_GROUP_dup(curve);
    if (group == NULL) return NULL;
    if (EC_GROUP_set_generator(group, q, EC_GROUP_get0_order(curve), EC_GROUP_get0_cofactor(curve)) != 1
        || EC_GROUP_precompute_mult(group, NULL) != 1) {
        EC_GROUP_free(group);
        return NULL;
    }
    return group;
}
static inline void ledger_ec_group_free(EC_GROUP *group) { EC_GROUP_free(group); }

/* ECDSA verification as SEC 1 v2 section 4.1.4 states it (and as ECDSA_do_verify computes it), for
   a 32-byte digest and a 64-byte signature R||S, with `table` from ledger_ec_key_precompute(key):
   R and S in [1, n-1]; w = S^-1 mod n; u1 = e·w, u2 = R·w (mod n); P = u1·G + u2·Q, not the point
   at infinity; valid when P's x mod n equals R. 1 valid, 0 not, -1 when libcrypto failed. */
static inline int ledger_ecdsa_verify_precomputed(const unsigned char *digest, const unsigned char *signature, const EC_KEY *key,
                                                  const EC_GROUP *table) {
    const EC_GROUP *curve = EC_KEY_get0_group(key);
    const BIGNUM *order = curve == NULL ? NULL : EC_GROUP_get0_order(curve);
    if (order == NULL || BN_num_bits(order) != 256) return -1;
    BN_CTX *context = BN_CTX_new();
    if (context == NULL) return -1;
    int verdict = -1;
    EC_POINT *p = NULL, *q = NULL;
    BN_CTX_start(context);
    BIGNUM *r = BN_CTX_get(context), *s = BN_CTX_get(context), *e = BN_CTX_get(context), *w = BN_CTX_get(context);
    BIGNUM *u1 = BN_CTX_get(context), *u2 = BN_CTX_get(context), *x = BN_CTX_get(context);
    if (x == NULL || BN_bin2bn(signature, 32, r) == NULL || BN_bin2bn(signature + 32, 32, s) == NULL
        || BN_bin2bn(digest, 32, e) == NULL)
        goto done;
    if (BN_is_zero(r) || BN_is_zero(s) || BN_cmp(r, order) >= 0 || BN_cmp(s, order) >= 0) {
        verdict = 0;
        goto done;
    }
    /* n is prime and 0 < s < n: s has an inverse. e has as many bits as n: no truncation. */
    if (BN_mod_inverse(w, s, order, context) == NULL || !BN_mod_mul(u1, e, w, order, context) || !BN_mod_mul(u2, r, w, order, context))
        goto done;
    p = EC_POINT_new(curve);
    q = EC_POINT_new(curve);
    if (p == NULL || q == NULL || !EC_POINT_mul(curve, p, u1, NULL, NULL, context) || !EC_POINT_mul(table, q, u2, NULL, NULL, context)
        || !EC_POINT_add(curve, p, p, q, context))
        goto done;
    if (EC_POINT_is_at_infinity(curve, p)) {
        verdict = 0;
        goto done;
    }
    if (!EC_POINT_get_affine_coordinates(curve, p, x, NULL, context) || !BN_nnmod(x, x, order, context)) goto done;
    verdict = BN_cmp(x, r) == 0 ? 1 : 0;
done:
    EC_POINT_free(p);
    EC_POINT_free(q);
    BN_CTX_end(context);
    BN_CTX_free(context);
    return verdict;
}
#pragma clang diagnostic pop
