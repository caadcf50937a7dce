import StrictJSON

/// The App Store environment a payload was produced in.
public enum AppleEnvironment: String, Sendable, Codable, CaseIterable {
    case production = "Production"
    case sandbox = "Sandbox"
    case xcode = "Xcode"
    case localTesting = "LocalTesting"

    /// Xcode and LocalTesting data is signed by a local key, never by Apple.
    public var isLocal: Bool { self == .xcode || self == .localTesting }

    /// The environment named exactly `name`, compared byte for byte as UTF-8 (unlike
    /// `init(rawValue:)`, which uses `String` equality and so canonical equivalence).
    public init?(exactly name: String) {
        guard let environment = Self.allCases.first(where: { JSONBytes.equal($0.rawValue, name) }) else { return nil }
        self = environment
    }
}

/// What a ``SignedDataVerifier`` accepts.
public struct VerifierConfiguration: Sendable {
    /// The app's bundle identifier; transactions and notifications must carry exactly this.
    public var bundleId: String
    /// The environment the data must come from.
    public var environment: AppleEnvironment
    /// The app's Apple ID; required when `environment == .production`, compared for notifications then.
    public var appAppleId: Int64?
    /// Trusted roots (DER). Only these anchor chains; `x5c[2]` is never trusted.
    public var rootCertificates: [[UInt8]]
    /// Xcode / LocalTesting configurations (no signature checks at all) are refused unless this is true.
    public var allowLocalTesting: Bool
    /// When true (the default, offline mode) chains are validated at the payload's `signedDate`
    /// (`receiptCreationDate` for an AppTransaction), falling back to `now`. When false, always at `now`.
    public var validateAtSignedDate: Bool

    /// - Parameters: see the properties; `rootCertificates` defaults to Apple Root CA - G3.
    public init(
        bundleId: String,
        environment: AppleEnvironment,
        appAppleId: Int64? = nil,
        rootCertificates: [[UInt8]] = [AppleRootCertificates.appleRootCAG3],
        allowLocalTesting: Bool = false,
        validateAtSignedDate: Bool = true
    ) {
        self.bundleId = bundleId
        self.environment = environment
        self.appAppleId = appAppleId
        self.rootCertificates = rootCertificates
        self.allowLocalTesting = allowLocalTesting
        self.validateAtSignedDate = validateAtSignedDate
    }
}
