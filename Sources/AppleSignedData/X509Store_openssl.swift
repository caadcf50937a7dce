import COpenSSL
import Foundation
import LedgerCrypto

/// Path validation of leaf + one untrusted intermediate against a set of trusted roots.
///
/// Owns the `X509_STORE` it creates; `validate` owns (and frees, whatever happens) its context and stack.
/// The store is filled once and then only read: OpenSSL lets any number of threads verify against one
/// `X509_STORE`, each with its own `X509_STORE_CTX` (which `validate` creates per call).
final class ChainValidator: @unchecked Sendable {
    private let store: OpaquePointer
    private let roots: [X509Certificate]

    init(roots: [X509Certificate]) throws(VerificationError) {
        guard let store = X509_STORE_new() else { throw .cryptoFailure("X509_STORE_new") }
        self.store = store
        self.roots = roots
        // OpenSSL 3 accepts a root added twice, so any failure here is libcrypto's.
        for root in roots where X509_STORE_add_cert(store, root.pointer) != 1 {
            throw .cryptoFailure("X509_STORE_add_cert")
        }
    }

    deinit { X509_STORE_free(store) }

    /// Validates `leaf` ← `intermediate` ← configured root at `time` (Unix seconds) and returns the path
    /// OpenSSL built (leaf first, trust anchor last); throws `.invalidChain` with OpenSSL's reason when the
    /// chain does not validate.
    func validate(leaf: X509Certificate, intermediate: X509Certificate, time: Int64) throws(VerificationError) -> [X509Certificate] {
        guard let context = X509_STORE_CTX_new() else { throw .cryptoFailure("X509_STORE_CTX_new") }
        defer { X509_STORE_CTX_free(context) }
        guard let untrusted = OPENSSL_sk_new_null() else { throw .cryptoFailure("OPENSSL_sk_new_null") }
        defer { OPENSSL_sk_free(untrusted) }  // elements are owned by `intermediate`
        guard OPENSSL_sk_push(untrusted, UnsafeRawPointer(intermediate.pointer)) > 0 else { throw .cryptoFailure("OPENSSL_sk_push") }
        guard X509_STORE_CTX_init(context, store, leaf.pointer, untrusted) == 1 else { throw .cryptoFailure("X509_STORE_CTX_init") }
        guard let parameters = X509_STORE_CTX_get0_param(context) else { throw .cryptoFailure("X509_STORE_CTX_get0_param") }
        X509_VERIFY_PARAM_set_time(parameters, time_t(time))
        let verified = X509_verify_cert(context)
        let code = X509_STORE_CTX_get_error(context)
        let reason = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
        // Out of memory is libcrypto's failure. Anything else is the chain's: 0 with a reason, or (OpenSSL 3.0)
        // a negative "internal error" for input it cannot process, such as a leaf key that does not decode.
        guard code != X509_V_ERR_OUT_OF_MEM else { throw .cryptoFailure("X509_verify_cert (\(reason))") }
        let detail = verified < 0 ? CryptoError("X509_verify_cert").detail : ""
        ERR_clear_error()
        guard verified == 1 else {
            let depth = X509_STORE_CTX_get_error_depth(context)
            let names = ["leaf", "intermediate", "root"]
            let position = names.indices.contains(Int(depth)) ? names[Int(depth)] : "depth \(depth)"
            throw VerificationError(
                .invalidChain,
                "certificate chain did not validate at \(time): \(reason) (at the \(position))\(detail.isEmpty ? "" : ": \(detail)")")
        }
        guard let chain = X509_STORE_CTX_get0_chain(context) else { throw .cryptoFailure("X509_STORE_CTX_get0_chain") }
        var path: [X509Certificate] = []
        for index in 0..<OPENSSL_sk_num(chain) {
            guard let certificate = OPENSSL_sk_value(chain, index) else { throw .cryptoFailure("OPENSSL_sk_value") }
            path.append(try X509Certificate(retaining: OpaquePointer(certificate)))
        }
        return path
    }
}
