// libFuzzer harness for App Store JWS (`ledger submit`, `ledger inspect-jws`): splitting into segments,
// canonical base64url, the header (alg, crit, x5c), the certificate chain, the ES256 signature, then the
// payload. Every input gets a verdict or a VerificationError, never a trap and never crypto-failure;
// base64url decodes only canonical text (a decoded segment re-encodes to itself).
import AppleSignedData
import LedgerCrypto

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJWS(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let jws = String(decoding: fuzzInput(start, count), as: UTF8.self)
    for segment in jws.split(separator: ".", omittingEmptySubsequences: false) {
        if let bytes = Base64URL.decode(segment) { expect(Base64URL.encode(bytes) == segment, "base64url \(segment) is not canonical") }
    }
    let now = FuzzVerifiers.now
    FuzzVerifiers.check(FuzzVerifiers.sandbox.inspect(jws, now: now), "inspect")
    FuzzVerifiers.check(FuzzVerifiers.sandbox.verifyTransaction(jws, now: now), "transaction")
    FuzzVerifiers.check(FuzzVerifiers.sandbox.verifyNotification(jws, now: now), "notification")
    FuzzVerifiers.check(FuzzVerifiers.xcode.verifyTransaction(jws, now: now), "transaction (Xcode)")
    FuzzVerifiers.check(FuzzVerifiers.xcode.verifyRenewalInfo(jws, now: now), "renewal info (Xcode)")
    FuzzVerifiers.check(FuzzVerifiers.xcode.verifyNotification(jws, now: now), "notification (Xcode)")
    return 0
}
