import Foundation
import LedgerCrypto

/// **For tests and tools only** (the verifier never uses it): builds Firebase-shaped ID tokens with
/// a given key and algorithm, including the wrong ones a verifier must refuse.
public enum TestTokenSigner {
    public enum Algorithm: Sendable {
        /// RSASSA-PKCS1-v1_5 with SHA-256 (what Firebase uses) or SHA-512, with a PEM private key.
        case rs256(privateKeyPEM: String)
        case rs512(privateKeyPEM: String)
        /// HMAC-SHA256 keyed with `key` (e.g. the public certificate's bytes: the classic confusion attack).
        case hs256(key: [UInt8])
        /// No signature at all.
        case none

        var name: String {
            switch self {
            case .rs256: "RS256"
            case .rs512: "RS512"
            case .hs256: "HS256"
            case .none: "none"
            }
        }
    }

    /// The claims of a valid token for `uid` in `projectId`, issued at `now` (seconds) for an hour.
    public static func claims(projectId: String, uid: String, now: Int64) -> [String: Any] {
        [
            "iss": "https://securetoken.google.com/\(projectId)", "aud": projectId, "auth_time": now - 60, "user_id": uid, "sub": uid,
            "iat": now, "exp": now + 3600, "firebase": ["identities": [:] as [String: Any], "sign_in_provider": "password"],
        ]
    }

    /// A compact token: header `{"alg", "kid", "typ": "JWT"}` (or `header` as given), `claims`,
    /// signed with `algorithm`.
    public static func sign(claims: [String: Any], keyId: String?, algorithm: Algorithm, header: [String: Any]? = nil) throws -> String {
        var headerObject: [String: Any] = ["alg": algorithm.name, "typ": "JWT"]
        if let keyId { headerObject["kid"] = keyId }
        return try sign(
            header: [UInt8](try JSONSerialization.data(withJSONObject: header ?? headerObject, options: [.sortedKeys])),
            claims: [UInt8](try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])), algorithm: algorithm)
    }

    /// A compact token of exactly these header and claims bytes (to build malformed tokens).
    public static func sign(header: [UInt8], claims: [UInt8], algorithm: Algorithm) throws -> String {
        let encodedHeader = Base64URL.encode(header)
        let encodedClaims = Base64URL.encode(claims)
        let input = Array((encodedHeader + "." + encodedClaims).utf8)
        let signature: [UInt8]
        switch algorithm {
        case .rs256(let pem): signature = try RSASigner.sign(input, privateKeyPEM: pem, hash: .sha256)
        case .rs512(let pem): signature = try RSASigner.sign(input, privateKeyPEM: pem, hash: .sha512)
        case .hs256(let key): signature = try Digest.hmacSHA256(key: key, message: input)
        case .none: signature = []
        }
        return encodedHeader + "." + encodedClaims + "." + Base64URL.encode(signature)
    }
}
