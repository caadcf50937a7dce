import Foundation
import LedgerCore
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
        /// A valid token whose sign-in (`auth_time`) is too long ago for what it asks (deleting the
        /// account): the app signs the user in again and retries, as Firebase asks of its own deletion.
        case requiresRecentLogin = "requires-recent-login"
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
        var text = token
        self = try text.withUTF8 { bytes in Result { () throws(TokenError) in try FirebaseIDToken(utf8: bytes) } }.get()
    }

    /// ``init(_:)`` on the token's UTF-8 bytes, read in place.
    private init(utf8 token: UnsafeBufferPointer<UInt8>) throws(TokenError) {
        guard let parts = CompactJWS(token) else {
            throw TokenError(.malformedToken, "the token is not three base64url parts joined by dots")
        }
        guard let headerBytes = Base64URL.decode(utf8: UnsafeBufferPointer(rebasing: token[parts.header])),
            let payloadBytes = Base64URL.decode(utf8: UnsafeBufferPointer(rebasing: token[parts.payload])),
            let signature = Base64URL.decode(utf8: UnsafeBufferPointer(rebasing: token[parts.signature]))
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
        signingInput = Array(token[parts.signingInput])
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
    /// The token's `auth_time`: when the user last signed in (a refreshed token keeps it), seconds
    /// since the epoch.
    public let signedInAt: Int64

    public init(uid: String, expiresAt: Int64, signedInAt: Int64) {
        self.uid = uid
        self.expiresAt = expiresAt
        self.signedInAt = signedInAt
    }
}

/// Verifies Firebase ID tokens as Firebase documents for third-party JWT libraries: RS256 only, a
/// `kid` naming one of Google's current certificates, `aud` the project id, `iss`
/// `https://securetoken.google.com/<project id>`, `exp` in the future and `iat` and `auth_time`
/// in the past (within ``clockSkew`` seconds), `sub` 1 to 128 characters. Revocation is not
/// checked: that needs Google's API.
///
/// Apps send the same token for up to an hour, so tokens that verified are remembered (a bounded
/// ``VerifiedTokens`` cache keyed by SHA-256 of the token's bytes): a token seen before costs a
/// hash instead of a parse and an RSA verification. The cache never widens what is accepted: on
/// every request `exp`, `iat` and `auth_time` are checked against the clock again, and the token's
/// `kid` must still name the very certificate its signature was verified with (after a rotation,
/// or when the `kid` is gone, the token is verified again in full, and refused if it must be).
public final class FirebaseTokenVerifier: Sendable {
    public let projectId: String
    /// Seconds of clock difference tolerated on `exp`, `iat` and `auth_time`.
    public let clockSkew: Int64
    private let keys: FirebaseKeySource
    private let clock: @Sendable () -> Int64
    private let checkSignature: SignatureCheck
    private let verified: VerifiedTokens

    /// Checks an RS256 signature of a message with a key: true or false is a verdict; a thrown
    /// ``CryptoError`` (libcrypto failing) is none.
    package typealias SignatureCheck = @Sendable (RSAPublicKey, _ signature: [UInt8], _ message: [UInt8]) throws(CryptoError) -> Bool

    /// `cacheCapacity`: the most verified tokens remembered (0: none, every token verified in full).
    public convenience init(
        projectId: String, keys: FirebaseKeySource, clockSkew: Int64 = 300,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }, cacheCapacity: Int = 10_000
    ) {
        self.init(
            projectId: projectId, keys: keys, clockSkew: clockSkew, clock: clock, cacheCapacity: cacheCapacity,
            checkSignature: Self.libcryptoRS256)
    }

    /// A verifier whose signatures are checked by `checkSignature` (libcrypto's RS256 but in tests).
    package init(
        projectId: String, keys: FirebaseKeySource, clockSkew: Int64 = 300,
        clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }, cacheCapacity: Int = 10_000,
        checkSignature: @escaping SignatureCheck
    ) {
        self.projectId = projectId
        self.keys = keys
        self.clockSkew = clockSkew
        self.clock = clock
        self.checkSignature = checkSignature
        verified = VerifiedTokens(capacity: cacheCapacity)
    }

    /// libcrypto's RSASSA-PKCS1-v1_5 SHA-256 check.
    package static let libcryptoRS256: SignatureCheck = { key, signature, message throws(CryptoError) in
        try key.isValidRS256Signature(signature, for: message)
    }

    /// How many verifications were answered from the cache of verified tokens, and how many not.
    public var cacheCounts: (hits: Int, misses: Int) { verified.counts }

    /// The account `token` proves, or why it proves none.
    public func verify(_ token: String) -> Result<FirebaseUser, TokenError> {
        Result { () throws(TokenError) in try check(token) }
    }

    private func check(_ text: String) throws(TokenError) -> FirebaseUser {
        let digest = verified.isEnabled ? VerifiedTokens.digest(text) : nil
        if let digest, let entry = verified[digest] {
            let now = clock()
            // The same bytes verified before: what they say was checked then; what depends on the
            // clock and on the current certificate set is checked now.
            if case .success(let key) = keys.key(for: entry.keyId), key === entry.key {
                try checkTimes(expiresAt: entry.user.expiresAt, issuedAt: entry.issuedAt, authTime: entry.authTime, now: now)
                return entry.user
            }
            verified.remove(digest)
        }
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
        let (expiresAt, issuedAt, authTime) = try checkTimes(
            expiresAt: token.expiresAt, issuedAt: token.issuedAt, authTime: token.authTime, now: clock())
        guard let uid = token.subject, (1...128).contains(uid.count) else {
            throw TokenError(.invalidSubject, "sub (the UID) must be 1 to 128 characters")
        }
        // The rule `submit` applies to a UID: a sub it would refuse never reaches the ledger.
        if let problem = FirebaseUID.problem(uid) { throw TokenError(.invalidSubject, "sub (the UID) \(problem)") }
        let key = try keys.key(for: keyId).get()
        let valid: Bool
        do {
            valid = try checkSignature(key, token.signature, token.signingInput)
        } catch {
            throw TokenError(.cryptoFailure, "the signature could not be checked: \(error)")
        }
        guard valid else { throw TokenError(.invalidSignature, "the signature does not verify with key \(keyId)") }
        let user = FirebaseUser(uid: uid, expiresAt: expiresAt, signedInAt: authTime)
        if let digest {
            verified[digest] = VerifiedTokens.Entry(user: user, issuedAt: issuedAt, authTime: authTime, keyId: keyId, key: key)
        }
        return user
    }

    /// Refuses `user` with ``TokenError/Code/requiresRecentLogin`` unless they signed in at most
    /// `seconds` ago (``clockSkew`` tolerated): what a destructive request asks of a token on top of
    /// ``verify(_:)``, since a token refreshed for weeks still verifies.
    public func requireSignIn(_ user: FirebaseUser, within seconds: Int64) throws(TokenError) {
        guard clock() - user.signedInAt <= seconds + clockSkew else {
            throw TokenError(
                .requiresRecentLogin, "the user last signed in more than \(seconds) seconds ago: sign in again, then retry with the new ID token")
        }
    }

    /// `exp` in the future, `iat` and `auth_time` in the past, each within ``clockSkew``: the three, present.
    @discardableResult
    private func checkTimes(expiresAt: Int64?, issuedAt: Int64?, authTime: Int64?, now: Int64) throws(TokenError) -> (
        expiresAt: Int64, issuedAt: Int64, authTime: Int64
    ) {
        guard let expiresAt else { throw TokenError(.malformedToken, "the token has no exp") }
        guard expiresAt + clockSkew > now else { throw TokenError(.expired, "the token has expired: get a fresh ID token") }
        guard let issuedAt else { throw TokenError(.malformedToken, "the token has no iat") }
        guard issuedAt - clockSkew <= now else { throw TokenError(.issuedInFuture, "iat is in the future") }
        guard let authTime else { throw TokenError(.malformedToken, "the token has no auth_time") }
        guard authTime - clockSkew <= now else { throw TokenError(.authTimeInFuture, "auth_time is in the future") }
        return (expiresAt, issuedAt, authTime)
    }
}

/// Tokens that verified, by SHA-256 of their bytes, with what their verification established and
/// the certificate it used. Bounded: two generations of at most half the capacity each; when the
/// current one is full it becomes the previous one (and the previous one is dropped), so tokens in
/// use stay (a hit in the previous generation moves the entry to the current one) and memory stays
/// flat. Only successes are kept. Safe to use from any number of threads.
final class VerifiedTokens: @unchecked Sendable {
    struct Entry {
        let user: FirebaseUser
        let issuedAt: Int64
        let authTime: Int64
        let keyId: String
        /// The certificate's key the signature verified with (compared by identity).
        let key: RSAPublicKey
    }

    private let half: Int
    private let lock = NSLock()
    private var current: [Digest32: Entry] = [:]
    private var previous: [Digest32: Entry] = [:]
    private var hits = 0
    private var misses = 0

    init(capacity: Int) { half = max(0, capacity) / 2 }

    var isEnabled: Bool { half > 0 }

    var counts: (hits: Int, misses: Int) { lock.withLock { (hits, misses) } }

    /// SHA-256 of `token`'s UTF-8 bytes; nil only when libcrypto fails (the token is then verified in full).
    static func digest(_ token: String) -> Digest32? {
        var text = token
        return text.withUTF8 { try? LedgerCrypto.Digest.sha256(UnsafeRawBufferPointer($0)) }
    }

    subscript(digest: Digest32) -> Entry? {
        get {
            lock.withLock {
                if let entry = current[digest] {
                    hits += 1
                    return entry
                }
                guard let entry = previous.removeValue(forKey: digest) else {
                    misses += 1
                    return nil
                }
                hits += 1
                insert(entry, digest)
                return entry
            }
        }
        set {
            lock.withLock {
                if let newValue { insert(newValue, digest) } else { current[digest] = nil }
            }
        }
    }

    func remove(_ digest: Digest32) {
        lock.withLock {
            current[digest] = nil
            previous[digest] = nil
        }
    }

    /// Under `lock`.
    private func insert(_ entry: Entry, _ digest: Digest32) {
        if current.count >= half, current[digest] == nil {
            previous = current
            current = [:]
            current.reserveCapacity(half)
        }
        current[digest] = entry
    }
}
