import COpenSSL
import Foundation
import LedgerCrypto

// Every libcrypto return code below is checked. What the input decides (not a certificate, a signature
// that does not verify) is a value; a failure of libcrypto itself (out of memory, no provider) is a
// thrown `VerificationError` with code `.cryptoFailure` naming the call, never a verdict on the data.

extension VerificationError {
    /// libcrypto failed in `operation`, with OpenSSL's queued reasons.
    static func cryptoFailure(_ operation: String) -> VerificationError {
        VerificationError(.cryptoFailure, "\(CryptoError(operation))")
    }
}

/// Owns one OpenSSL `X509*`, freed in `deinit`.
final class X509Certificate {
    let pointer: OpaquePointer

    /// Parses DER; nil when the bytes are not exactly one DER certificate.
    init?(der: [UInt8]) {
        guard !der.isEmpty else { return nil }
        var parsed: OpaquePointer?
        var consumed = 0
        der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            parsed = d2i_X509(nil, &cursor, buffer.count)
            if let cursor, let base = buffer.baseAddress { consumed = cursor - base }
        }
        ERR_clear_error()  // the reason a parse failed is not reported: the caller says which entry it was
        guard let parsed else { return nil }
        guard consumed == der.count else {  // trailing bytes: not exactly one certificate
            X509_free(parsed)
            return nil
        }
        pointer = parsed
    }

    /// Shares an `X509*` another owner holds (a certificate of a built chain), adding a reference.
    init(retaining pointer: OpaquePointer) throws(VerificationError) {
        guard X509_up_ref(pointer) == 1 else { throw .cryptoFailure("X509_up_ref") }
        self.pointer = pointer
    }

    deinit { X509_free(pointer) }

    /// Whether `time` (Unix seconds) lies within the validity period, by OpenSSL's own comparison
    /// (the one `X509_verify_cert` makes): notBefore ≤ time < notAfter. False when a field is unreadable.
    func isValid(at time: Int64) -> Bool {
        var time = time_t(time)
        return X509_cmp_time(X509_get0_notBefore(pointer), &time) == -1 && X509_cmp_time(X509_get0_notAfter(pointer), &time) == 1
    }

    /// The Unix seconds `notBefore..<notAfter` for which ``isValid(at:)`` is true, read once from the two
    /// fields and checked with OpenSSL's own comparison just inside and just outside each edge (each side
    /// of the comparison is monotone in the time, so agreeing there it agrees everywhere); nil when a field
    /// is unreadable or OpenSSL disagrees.
    func validitySeconds() -> Range<Int64>? {
        guard let from = Self.seconds(X509_get0_notBefore(pointer)), let until = Self.seconds(X509_get0_notAfter(pointer)),
            from < until, isValid(at: from), !isValid(at: from - 1), isValid(at: until - 1), !isValid(at: until)
        else { return nil }
        return from..<until
    }

    /// An ASN1 time (UTCTime or GeneralizedTime) in Unix seconds; nil when OpenSSL cannot read it.
    private static func seconds(_ time: UnsafePointer<ASN1_TIME>?) -> Int64? {
        var fields = tm()
        guard let time, ASN1_TIME_to_tm(time, &fields) == 1 else {
            ERR_clear_error()
            return nil
        }
        let seconds = timegm(&fields)
        return seconds == -1 ? nil : Int64(seconds)
    }

    /// True when the certificate carries an extension with this dotted OID (value not inspected).
    func hasExtension(oid: String) throws(VerificationError) -> Bool {
        guard let object = OBJ_txt2obj(oid, 1) else { throw .cryptoFailure("OBJ_txt2obj(\(oid))") }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(pointer, object, -1) >= 0
    }

    /// Subject in OpenSSL's one-line form, e.g. `/C=US/O=Leaf` (at most 511 bytes).
    func subject() throws(VerificationError) -> String {
        guard let name = X509_get_subject_name(pointer) else { throw .cryptoFailure("X509_get_subject_name") }
        var buffer = [CChar](repeating: 0, count: 512)
        guard X509_NAME_oneline(name, &buffer, Int32(buffer.count)) != nil else { throw .cryptoFailure("X509_NAME_oneline") }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The public key (owned by the returned object); nil with OpenSSL's reason when it cannot be decoded.
    /// `precomputeAfter`: ``PublicKey/precomputeAfter``.
    func publicKey(precomputeAfter: Int = PublicKey.signaturesBeforePrecomputing) -> Result<PublicKey, CryptoError> {
        guard let key = X509_get_pubkey(pointer) else { return .failure(CryptoError("X509_get_pubkey")) }
        return .success(PublicKey(key, precomputeAfter: precomputeAfter))
    }
}

/// Owns one OpenSSL `EVP_PKEY*` (and, for an EC key, its `EC_KEY*` and, once in steady use, its
/// precomputed multiples), freed in `deinit`. Safe to use from any number of threads: libcrypto only
/// reads the key, and what changes is under a lock.
final class PublicKey: @unchecked Sendable {
    let pointer: OpaquePointer
    /// The EC key inside, taken once so that each ES256 signature costs `ECDSA_do_verify` alone; nil
    /// for a key of another type.
    private let ecKey: OpaquePointer?

    /// ES256 signatures that verified with this key before its multiples were precomputed.
    private var verified = 0
    /// The key's multiples (`ledger_ec_key_precompute`), made once ``precomputeAfter`` signatures
    /// have verified with it: then each ES256 verification costs about a third as much.
    private var table: Table = .none
    private let tableLock = NSLock()
    private enum Table {
        case none, computing, failed
        case ready(OpaquePointer)
    }
    /// Signatures that must verify with this key before its multiples are precomputed (tens of
    /// milliseconds, ~150 KB): only a key in steady use pays for it, such as the leaf of a cached
    /// Apple chain, never one seen once.
    let precomputeAfter: Int
    static let signaturesBeforePrecomputing = 16

    /// Whether ES256 signatures are now verified with the key's precomputed multiples.
    var hasPrecomputedMultiples: Bool { precomputed() != nil }

    init(_ pointer: OpaquePointer, precomputeAfter: Int = signaturesBeforePrecomputing) {
        self.pointer = pointer
        self.precomputeAfter = precomputeAfter
        ecKey = EVP_PKEY_get_base_id(pointer) == EVP_PKEY_EC ? ledger_pkey_get1_ec_key(pointer) : nil
    }

    deinit {
        if case .ready(let group) = table { ledger_ec_group_free(group) }
        if let ecKey { ledger_ec_key_free(ecKey) }
        EVP_PKEY_free(pointer)
    }

    /// The key's precomputed multiples when made; nil before (or when libcrypto could not make them).
    private func precomputed() -> OpaquePointer? {
        tableLock.withLock { if case .ready(let group) = table { group } else { nil } }
    }

    /// Counts a signature that verified without the table; the one that reaches ``precomputeAfter``
    /// makes the table (on this thread, once; the others verify without it meanwhile).
    private func countVerified(_ ecKey: OpaquePointer) {
        let compute = tableLock.withLock {
            guard case .none = table else { return false }
            verified += 1
            guard verified >= precomputeAfter else { return false }
            table = .computing
            return true
        }
        guard compute else { return }
        let group = ledger_ec_key_precompute(ecKey)
        if group == nil { ERR_clear_error() }
        tableLock.withLock { table = group.map { .ready($0) } ?? .failed }
    }

    /// True for an EC key on the named curve P-256 (prime256v1); false for any other key, including an EC key
    /// with explicit curve parameters (which has no group name).
    var isP256: Bool {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_EC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pointer, &name, name.count, &length) == 1 else {
            ERR_clear_error()
            return false
        }
        let group = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    /// Whether `signature`, 64 bytes R‖S (JOSE's form), is an ECDSA signature of SHA-256(`message`) by this
    /// EC key: what `EVP_DigestVerify` answers for the same signature in DER, without the EVP set-up or the
    /// DER round trip. R and S outside [1, n − 1] do not verify.
    func verifyES256(signature: [UInt8], message: UnsafeRawBufferPointer) throws(VerificationError) -> Bool {
        guard signature.count == 64 else { return false }
        guard let ecKey else { throw .cryptoFailure("EVP_PKEY_get1_EC_KEY") }
        let digest: Digest32
        do {
            digest = try Digest.sha256(message)
        } catch {
            throw VerificationError(.cryptoFailure, "\(error)")
        }
        if let table = precomputed() {
            let verdict = digest.withBytes { digest in
                signature.withUnsafeBufferPointer {
                    ledger_ecdsa_verify_precomputed(digest.baseAddress?.assumingMemoryBound(to: UInt8.self), $0.baseAddress, ecKey, table)
                }
            }
            switch verdict {
            case 1: return true
            case 0: return false
            default: throw .cryptoFailure("ECDSA verification with precomputed multiples (ES256)")
            }
        }
        guard let ecdsa = ECDSA_SIG_new() else { throw .cryptoFailure("ECDSA_SIG_new") }
        defer { ECDSA_SIG_free(ecdsa) }
        let (r, s) = signature.withUnsafeBufferPointer { raw in
            (BN_bin2bn(raw.baseAddress, 32, nil), BN_bin2bn(raw.baseAddress.map { $0 + 32 }, 32, nil))
        }
        guard let r, let s, ECDSA_SIG_set0(ecdsa, r, s) == 1 else {  // on success `ecdsa` owns r and s
            BN_free(r)
            BN_free(s)
            throw .cryptoFailure("BN_bin2bn / ECDSA_SIG_set0")
        }
        let verdict = digest.withBytes { ledger_ecdsa_do_verify($0.baseAddress?.assumingMemoryBound(to: UInt8.self), 32, ecdsa, ecKey) }
        switch verdict {
        case 1:
            countVerified(ecKey)
            return true
        case 0:
            ERR_clear_error()  // a signature that does not verify queues its reason
            return false
        default: throw .cryptoFailure("ECDSA_do_verify(ES256)")
        }
    }
}
