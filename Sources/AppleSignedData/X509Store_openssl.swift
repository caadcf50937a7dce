import COpenSSL
import Foundation
import LedgerCrypto

/// Path validation of leaf + one untrusted intermediate against a set of trusted roots.
///
/// Owns the `X509_STORE`, `X509_STORE_CTX` and untrusted stack it creates.
final class ChainValidator {
    private let store: OpaquePointer
    private let roots: [X509Certificate]

    init?(roots: [X509Certificate]) {
        guard let store = X509_STORE_new() else { return nil }
        self.store = store
        self.roots = roots
        for root in roots where X509_STORE_add_cert(store, root.pointer) != 1 {
            _ = CryptoError("X509_STORE_add_cert")  // duplicates are harmless; drain the queue
        }
    }

    deinit { X509_STORE_free(store) }

    /// Validates `leaf` ← `intermediate` ← configured root at `time` (Unix seconds).
    /// Returns the length of the built chain, or the OpenSSL reason on failure.
    func validate(leaf: X509Certificate, intermediate: X509Certificate, time: Int64) -> Result<Int, VerificationError> {
        guard let context = X509_STORE_CTX_new(), let untrusted = OPENSSL_sk_new_null() else {
            return .failure(VerificationError(.invalidChain, "could not allocate an OpenSSL verification context"))
        }
        defer {
            X509_STORE_CTX_free(context)
            OPENSSL_sk_free(untrusted)  // elements are owned by `intermediate`
        }
        guard OPENSSL_sk_push(untrusted, UnsafeRawPointer(intermediate.pointer)) > 0,
            X509_STORE_CTX_init(context, store, leaf.pointer, untrusted) == 1,
            let parameters = X509_STORE_CTX_get0_param(context)
        else {
            return .failure(VerificationError(.invalidChain, "could not set up chain validation: \(CryptoError("X509_STORE_CTX_init"))"))
        }
        X509_VERIFY_PARAM_set_time(parameters, time_t(time))
        let verified = X509_verify_cert(context)
        _ = CryptoError("X509_verify_cert")
        guard verified == 1 else {
            let code = X509_STORE_CTX_get_error(context)
            let depth = X509_STORE_CTX_get_error_depth(context)
            let reason = X509_verify_cert_error_string(Int(code)).map { String(cString: $0) } ?? "error \(code)"
            let names = ["leaf", "intermediate", "root"]
            let position = names.indices.contains(Int(depth)) ? names[Int(depth)] : "depth \(depth)"
            return .failure(VerificationError(.invalidChain, "certificate chain did not validate at \(time): \(reason) (at the \(position))"))
        }
        guard let chain = X509_STORE_CTX_get0_chain(context) else {
            return .failure(VerificationError(.invalidChain, "OpenSSL returned no chain"))
        }
        return .success(Int(OPENSSL_sk_num(chain)))
    }
}
