public import AppleSignedData
public import Foundation

/// What `ledger init` fixes for a ledger: the app whose signed data it accepts.
public struct LedgerConfiguration: Codable, Equatable, Sendable {
    public var bundleId: String
    /// `Production` or `Sandbox` (or `Xcode`/`LocalTesting` with `allowLocalTesting`).
    public var environment: AppleEnvironment
    public var appAppleId: Int64?
    /// Trusted roots, DER; empty means Apple Root CA - G3.
    public var rootCertificates: [Data]
    /// Accept Xcode/LocalTesting data, which carries no Apple signature. For development only.
    public var allowLocalTesting: Bool

    public init(
        bundleId: String, environment: AppleEnvironment, appAppleId: Int64? = nil, rootCertificates: [Data] = [],
        allowLocalTesting: Bool = false
    ) {
        self.bundleId = bundleId
        self.environment = environment
        self.appAppleId = appAppleId
        self.rootCertificates = rootCertificates
        self.allowLocalTesting = allowLocalTesting
    }

    /// The verifier this configuration describes.
    public func verifier() throws(VerificationError) -> SignedDataVerifier {
        try SignedDataVerifier(
            configuration: VerifierConfiguration(
                bundleId: bundleId, environment: environment, appAppleId: appAppleId,
                rootCertificates: rootCertificates.isEmpty ? [AppleRootCertificates.appleRootCAG3] : rootCertificates.map { [UInt8]($0) },
                allowLocalTesting: allowLocalTesting))
    }
}
