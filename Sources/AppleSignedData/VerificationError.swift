/// Why signed data was not accepted. `code` is stable and crosses process boundaries;
/// `message` says exactly what failed.
public struct VerificationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Stable, kebab-case failure classes.
    public enum Code: String, Sendable, CaseIterable {
        /// Not three base64url segments, header/payload not JSON objects, `alg` not ES256, `x5c` missing or not 3 entries.
        case invalidJWSFormat = "invalid-jws-format"
        /// An `x5c` entry is not base64 or not a DER X.509 certificate.
        case invalidCertificate = "invalid-certificate"
        /// Path validation against the configured roots failed, chain length is not 3, or an Apple OID is missing.
        case invalidChain = "invalid-chain"
        /// The ES256 signature does not verify with the leaf key (or the leaf key is not P-256).
        case verificationFailed = "verification-failed"
        /// bundleId (or, for a Production verifier, appAppleId) differs from the configuration.
        case invalidAppIdentifier = "invalid-app-identifier"
        /// The payload's environment differs from the configuration.
        case invalidEnvironment = "invalid-environment"
        /// A required field is missing or has the wrong type (also for unsigned `--trust-decoded` input).
        case invalidPayload = "invalid-payload"
        /// Family Sharing is not supported (produced by the ledger, never by the verifier).
        case familySharingUnsupported = "family-sharing-unsupported"
        /// The verifier configuration itself is unusable (no roots, Production without appAppleId, ...).
        case invalidConfiguration = "invalid-configuration"
        /// libcrypto failed while verifying (out of memory, no usable provider): says nothing about the data;
        /// retry. The message names the failing call.
        case cryptoFailure = "crypto-failure"
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
