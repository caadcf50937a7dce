// libFuzzer harness for X.509/DER and ECDSA through the OpenSSL wrappers of AppleSignedData. The first byte
// picks the parser: 0 a certificate (parsed, its subject, extensions and key read, then path-validated as
// leaf and as intermediate against the test PKI, its validity read as seconds), 1 a DER ECDSA signature (R‖S round-trips through DER),
// 2 a JOSE R‖S signature checked with the test leaf's key. Never a trap, a leak or a crypto-failure: input
// never makes libcrypto fail.
import LedgerCrypto

@testable import AppleSignedData

// Read-only after start-up; libFuzzer runs inputs on one thread.
nonisolated(unsafe) let leaf = X509Certificate(der: FuzzPKI.testLeaf)
nonisolated(unsafe) let intermediate = X509Certificate(der: FuzzPKI.testIntermediate)
nonisolated(unsafe) let roots = [FuzzPKI.testCA, FuzzPKI.appleRootG3].compactMap(X509Certificate.init(der:))
let time: Int64 = FuzzVerifiers.now / 1000

func noCryptoFailure<T>(_ what: String, _ body: () throws(VerificationError) -> T) {
    do {
        _ = try body()
    } catch {
        expect(error.code != .cryptoFailure, "\(what): \(error)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzX509(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = fuzzInput(start, count)
    guard let mode = input.first, let leaf, let intermediate else { return 0 }
    let bytes = Array(input.dropFirst())
    switch mode % 3 {
    case 0:
        guard let certificate = X509Certificate(der: bytes) else { return 0 }
        noCryptoFailure("subject") { () throws(VerificationError) in try certificate.subject() }
        noCryptoFailure("extension") { () throws(VerificationError) in try certificate.hasExtension(oid: SignedDataVerifier.leafOID) }
        if case .success(let key) = certificate.publicKey() { _ = key.isP256 }
        if let range = certificate.validitySeconds() {
            expect(certificate.isValid(at: range.lowerBound) && !certificate.isValid(at: range.upperBound), "validity range \(range)")
        }
        noCryptoFailure("as leaf") { () throws(VerificationError) in
            try ChainValidator(roots: roots).validate(leaf: certificate, intermediate: intermediate, time: time)
        }
        noCryptoFailure("as intermediate") { () throws(VerificationError) in
            try ChainValidator(roots: roots).validate(leaf: leaf, intermediate: certificate, time: time)
        }
    case 1:
        if let raw = ES256Signature.raw(fromDER: bytes) {
            expect((try? ES256Signature.raw(fromDER: ES256Signature.der(fromRaw: raw))) == raw, "R‖S did not round-trip through DER")
        }
    default:
        guard case .success(let key) = leaf.publicKey(), bytes.count >= 64 else { return 0 }
        let message = Array(bytes.dropFirst(64))
        noCryptoFailure("ES256") { () throws(VerificationError) in
            try message.withUnsafeBytes { message in
                Result { () throws(VerificationError) in try key.verifyES256(signature: Array(bytes.prefix(64)), message: message) }
            }.get()
        }
    }
    return 0
}
