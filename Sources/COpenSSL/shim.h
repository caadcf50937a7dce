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
#pragma clang diagnostic pop
