// Verifiers for the harnesses of App Store signed data, compiled into every harness (fuzz.sh): the test PKI's
// root and Apple Root CA - G3 for bundle com.example in Sandbox, and an Xcode verifier that checks no signature
// (so mutated payloads reach the decoders).
import AppleSignedData

enum FuzzVerifiers {
    /// 2025-11-01T02:09:35Z, when the test PKI chain is valid (the JWS seeds are signed then).
    static let now: Int64 = 1_761_962_975_000

    static let sandbox = verifier(.sandbox)
    static let xcode = verifier(.xcode)

    private static func verifier(_ environment: AppleEnvironment) -> SignedDataVerifier {
        let configuration = VerifierConfiguration(
            bundleId: "com.example", environment: environment, appAppleId: 1234,
            rootCertificates: [FuzzPKI.testCA, FuzzPKI.appleRootG3], allowLocalTesting: environment.isLocal)
        do {
            return try SignedDataVerifier(configuration: configuration)
        } catch {
            fatalError("FuzzVerifiers: \(error)")
        }
    }

    /// A verdict on untrusted bytes may be anything but "libcrypto failed": input never makes libcrypto fail,
    /// so a crypto-failure here is a misclassified input (or a real libcrypto bug) and stops the run.
    static func check<T>(_ result: Result<T, VerificationError>, _ what: String) {
        if case .failure(let error) = result { expect(error.code != .cryptoFailure, "\(what): \(error)") }
    }
}
