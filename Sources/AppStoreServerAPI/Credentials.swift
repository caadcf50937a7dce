import Foundation
public import LedgerCrypto

/// The App Store Connect in-app purchase key that signs every request: its key id, the team's issuer
/// id and the private key (the `.p8` file App Store Connect lets you download once). See `docs/apple-api.md`.
public struct AppStoreConnectCredentials: Sendable {
    public var issuerId: String
    public var keyId: String
    public var privateKey: ES256PrivateKey

    /// Checks that the ids are 1 to 128 printable ASCII characters (they are sent inside the token).
    public init(issuerId: String, keyId: String, privateKey: ES256PrivateKey) throws(AppStoreAPIError) {
        for (name, value) in [("issuer id", issuerId), ("key id", keyId)] {
            guard (1...128).contains(value.utf8.count), value.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
                throw .configuration("the \(name) \"\(value)\" is not 1 to 128 printable ASCII characters")
            }
        }
        self.issuerId = issuerId
        self.keyId = keyId
        self.privateKey = privateKey
    }

    /// The largest key file read: a P-256 `.p8` is about 250 bytes.
    public static let maximumKeyFileBytes = 64 * 1024

    /// Reads the private key from `path`: refuses a file group or others may access (mode 0600 is
    /// required), one over ``maximumKeyFileBytes``, and anything but an unencrypted EC P-256 PEM key.
    public static func privateKey(file path: String) throws(AppStoreAPIError) -> ES256PrivateKey {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw .configuration("the private key file \(path) cannot be read: \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .configuration("the private key file \(path) is not a regular file") }
        let mode = info.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            throw .configuration(
                "the private key file \(path) has mode \(String(mode, radix: 8)): group or others may read it; "
                    + "mode 0600 is required (run `chmod 600 \(path)`)")
        }
        guard info.st_size <= maximumKeyFileBytes else {
            throw .configuration("the private key file \(path) is larger than \(maximumKeyFileBytes) bytes")
        }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw .configuration("the private key file \(path) cannot be read: \(error.localizedDescription)")
        }
        return try privateKey(pem: data, source: path)
    }

    /// Parses the `.p8` bytes (`source` names them in errors).
    public static func privateKey(pem data: some Collection<UInt8>, source: String) throws(AppStoreAPIError) -> ES256PrivateKey {
        do {
            return try ES256PrivateKey(pem: String(decoding: data, as: UTF8.self))
        } catch {
            throw .configuration(
                "\(source) is not an App Store Connect in-app purchase key (a PKCS#8 EC P-256 .p8 file): \(error)")
        }
    }
}

/// Issues the API's bearer tokens (JWT, ES256) and reuses each until shortly before it expires.
/// Thread-safe.
final class BearerTokens: @unchecked Sendable {
    /// How long a token is valid: Apple accepts at most 60 minutes; a shorter life bounds the damage
    /// of a leaked token and tolerates a few minutes of clock skew.
    static let lifetimeSeconds: Int64 = 20 * 60
    /// A token is replaced when it has less than this left, so none expires in flight.
    static let renewalMarginSeconds: Int64 = 60

    let credentials: AppStoreConnectCredentials
    let bundleId: String
    private let clock: @Sendable () -> Int64
    private let lock = NSLock()
    private var current: (token: String, expires: Int64)?

    init(credentials: AppStoreConnectCredentials, bundleId: String, clock: @escaping @Sendable () -> Int64) {
        self.credentials = credentials
        self.bundleId = bundleId
        self.clock = clock
    }

    /// A token valid for at least ``renewalMarginSeconds`` more.
    func token() throws -> String {
        try lock.withLock {
            let now = clock() / 1000
            if let current, current.expires - now > Self.renewalMarginSeconds { return current.token }
            let token = try Self.jwt(credentials: credentials, bundleId: bundleId, issuedAt: now, lifetime: Self.lifetimeSeconds)
            current = (token, now + Self.lifetimeSeconds)
            return token
        }
    }

    /// The signed JWT: header `alg` ES256, `kid`, `typ` JWT; claims `iss`, `iat`, `exp`, `aud`
    /// `appstoreconnect-v1` and `bid` (Apple's "Generating JSON Web Tokens for API requests").
    static func jwt(credentials: AppStoreConnectCredentials, bundleId: String, issuedAt: Int64, lifetime: Int64) throws -> String {
        let header: [String: Any] = ["alg": "ES256", "kid": credentials.keyId, "typ": "JWT"]
        let claims: [String: Any] = [
            "iss": credentials.issuerId, "iat": issuedAt, "exp": issuedAt + lifetime, "aud": "appstoreconnect-v1", "bid": bundleId,
        ]
        func segment(_ object: [String: Any]) throws -> String {
            Base64URL.encode([UInt8](try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])))
        }
        let input = try segment(header) + "." + segment(claims)
        return input + "." + Base64URL.encode(try credentials.privateKey.sign(Array(input.utf8)))
    }
}
