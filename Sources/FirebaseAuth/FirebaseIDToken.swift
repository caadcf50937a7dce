import Foundation
import LedgerCrypto
import StrictJSON

/// Why a Firebase ID token was refused. Never carries the token itself.
public struct TokenError: Error, Equatable, CustomStringConvertible, Sendable {
    public enum Code: String, Sendable, CaseIterable {
        case malformedToken = "malformed-token"
        case unsupportedAlgorithm = "unsupported-algorithm"
        case unknownKey = "unknown-key"
        case invalidSignature = "invalid-signature"
        case wrongAudience = "wrong-audience"
        case wrongIssuer = "wrong-issuer"
        case expired = "token-expired"
        case issuedInFuture = "issued-in-future"
        case authTimeInFuture = "auth-time-in-future"
        case invalidSubject = "invalid-subject"
        /// The verifier has no usable certificates (not the caller's fault: retry later).
        case keysUnavailable = "keys-unavailable"
        /// libcrypto failed while checking the signature: no verdict on the token, a fault of the
        /// verifier (`ledger serve` answers 500 and logs it, never 401).
        case cryptoFailure = "internal"
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}

/// A Firebase ID token split into its parts, before any check: the compact JWS form
/// `header.payload.signature`, each base64url, header and payload JSON objects.
public struct FirebaseIDToken: Sendable {
    /// The longest token accepted (Firebase ID tokens are about 1 KB; custom claims are capped at 1,000 bytes).
    public static let maximumLength = 16 << 10

    public let algorithm: String
    public let keyId: String?
    /// The header's `crit` (critical extensions) list, if any: none is understood.
    public let critical: Bool
    public let audience: String?
    public let issuer: String?
    public let subject: String?
    /// NumericDate claims, in seconds since the epoch.
    public let expiresAt: Int64?
    public let issuedAt: Int64?
    public let authTime: Int64?
    /// `header.payload`, the bytes the signature covers.
    public let signingInput: [UInt8]
    public let signature: [UInt8]

    /// Splits and decodes `token`. Claims of the wrong JSON type are refused here; whether they
    /// are right is for ``FirebaseTokenVerifier``.
    public init(_ token: String) throws(TokenError) {
        guard token.utf8.count <= Self.maximumLength else {
            throw TokenError(.malformedToken, "the token is longer than \(Self.maximumLength) bytes")
        }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw TokenError(.malformedToken, "the token is not three base64url parts joined by dots") }
        guard let headerBytes = Base64URL.decode(Substring(parts[0])), let payloadBytes = Base64URL.decode(Substring(parts[1])),
            let signature = Base64URL.decode(Substring(parts[2]))
        else { throw TokenError(.malformedToken, "a part of the token is not canonical base64url") }
        // Strictly: a key given twice (two `sub`s, two `alg`s) is refused, never resolved.
        let reader = JSONReader(maximumDepth: 8, maximumBytes: Self.maximumLength)
        let header: JSONMembers
        let claims: JSONMembers
        do {
            header = try reader.object(headerBytes)
            claims = try reader.object(payloadBytes)
        } catch {
            throw TokenError(.malformedToken, "the token header or payload is not a JSON object: \(error.message)")
        }
        guard let algorithm = header["alg"]?.string else { throw TokenError(.malformedToken, "the token header has no alg") }
        self.algorithm = algorithm
        keyId = try Self.string(header, "kid")
        critical = header["crit"] != nil
        audience = try Self.string(claims, "aud")
        issuer = try Self.string(claims, "iss")
        subject = try Self.string(claims, "sub")
        expiresAt = try Self.numericDate(claims, "exp")
        issuedAt = try Self.numericDate(claims, "iat")
        authTime = try Self.numericDate(claims, "auth_time")
        signingInput = Array(token.utf8.prefix(parts[0].count + 1 + parts[1].count))
        self.signature = signature
    }

    private static func string(_ object: JSONMembers, _ name: String) throws(TokenError) -> String? {
        guard let value = object[name] else { return nil }
        guard let text = value.string else { throw TokenError(.malformedToken, "\(name) is not a string") }
        return text
    }

    /// A JSON number of seconds (a fraction is dropped: NumericDate allows one).
    private static func numericDate(_ object: JSONMembers, _ name: String) throws(TokenError) -> Int64? {
        switch object[name] {
        case nil: return nil
        case .integer(let seconds)?: return seconds
        case .number(let seconds)? where seconds.isFinite && abs(seconds) < 1e15: return Int64(seconds.rounded(.down))
        default: throw TokenError(.malformedToken, "\(name) is not a number of seconds")
        }
    }
}

/// The verified account of a Firebase ID token.
public struct FirebaseUser: Equatable, Sendable {
    /// The token's `sub`: the Firebase UID.
    public let uid: String
    /// The token's `exp`, seconds since the epoch.
    public let expiresAt: Int64

    public init(uid: String, expiresAt: Int64) {
        self.uid = uid
        self.expiresAt = expiresAt
    }
}

/// Verifies Firebase ID tokens as Firebase documents for third-party JWT libraries: RS256 only, a
/// `kid` naming one of Google's current certificates, `aud` the project id, `iss`
/// `https://securetoken.google.com/<project id>`, `exp` in the future and `iat` and `auth_time`
/// in the past (within ``clockSkew`` seconds), `sub` 1 to 128 characters. Revocation is not
/// checked: that needs Google's API.
public final class FirebaseTokenVerifier: Sendable {
    public let projectId: String
    /// Seconds of clock difference tolerated on `exp`, `iat` and `auth_time`.
    public let clockSkew: Int64
    private let keys: FirebaseKeySource
    private let clock: @Sendable () -> Int64
    private let checkSignature: SignatureCheck

    /// Checks an RS256 signature of a message with a key: true or false is a verdict; a thrown
    /// ``CryptoError`` (libcrypto failing) is none.
    package typealias SignatureCheck = @Sendable (RSAPublicKey, _ signature: [UInt8], _ message: [UInt8]) throws(CryptoError) -> Bool

    public convenience init(
        projectId: String, keys: FirebaseKeySource, clockSkew: Int64 = 300,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.init(projectId: projectId, keys: keys, clockSkew: clockSkew, clock: clock, checkSignature: Self.libcryptoRS256)
    }

    /// A verifier whose signatures are checked by `checkSignature` (libcrypto's RS256 but in tests).
    package init(
        projectId: String, keys: FirebaseKeySource, clockSkew: Int64 = 300,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }, checkSignature: @escaping SignatureCheck
    ) {
        self.projectId = projectId
        self.keys = keys
        self.clockSkew = clockSkew
        self.clock = clock
        self.checkSignature = checkSignature
    }

    /// libcrypto's RSASSA-PKCS1-v1_5 SHA-256 check.
    package static let libcryptoRS256: SignatureCheck = { key, signature, message throws(CryptoError) in
        try key.isValidRS256Signature(signature, for: message)
    }

    /// The account `token` proves, or why it proves none.
    public func verify(_ token: String) -> Result<FirebaseUser, TokenError> {
        Result { () throws(TokenError) in try check(token) }
    }

    private func check(_ text: String) throws(TokenError) -> FirebaseUser {
        let token = try FirebaseIDToken(text)
        guard token.algorithm == "RS256" else {
            throw TokenError(.unsupportedAlgorithm, "alg \(token.algorithm) is not RS256, the only algorithm Firebase ID tokens use")
        }
        guard !token.critical else { throw TokenError(.unsupportedAlgorithm, "the token header lists critical extensions") }
        guard let keyId = token.keyId, !keyId.isEmpty else { throw TokenError(.malformedToken, "the token header has no kid") }
        guard token.audience == projectId else {
            throw TokenError(.wrongAudience, "aud is not this project (\(projectId)): the token was issued for another Firebase project")
        }
        guard token.issuer == "https://securetoken.google.com/\(projectId)" else {
            throw TokenError(.wrongIssuer, "iss is not https://securetoken.google.com/\(projectId)")
        }
        let now = clock()
        guard let expiresAt = token.expiresAt else { throw TokenError(.malformedToken, "the token has no exp") }
        guard expiresAt + clockSkew > now else { throw TokenError(.expired, "the token has expired: get a fresh ID token") }
        guard let issuedAt = token.issuedAt else { throw TokenError(.malformedToken, "the token has no iat") }
        guard issuedAt - clockSkew <= now else { throw TokenError(.issuedInFuture, "iat is in the future") }
        guard let authTime = token.authTime else { throw TokenError(.malformedToken, "the token has no auth_time") }
        guard authTime - clockSkew <= now else { throw TokenError(.authTimeInFuture, "auth_time is in the future") }
        guard let uid = token.subject, (1...128).contains(uid.count) else {
            throw TokenError(.invalidSubject, "sub (the UID) must be 1 to 128 characters")
        }
        let key = try keys.key(for: keyId).get()
        let valid: Bool
        do {
            valid = try checkSignature(key, token.signature, token.signingInput)
        } catch {
            throw TokenError(.cryptoFailure, "the signature could not be checked: \(error)")
        }
        guard valid else { throw TokenError(.invalidSignature, "the signature does not verify with key \(keyId)") }
        return FirebaseUser(uid: uid, expiresAt: expiresAt)
    }
}
