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
#pragma clang diagnostic pop
