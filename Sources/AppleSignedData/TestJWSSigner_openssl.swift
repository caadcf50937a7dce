import Foundation
import LedgerCrypto

/// **For tests and tools only**: builds App Store-shaped JWS (ES256 + `x5c`) with a given private key,
/// e.g. the test PKI's `testLeaf.key.pem` with `[testLeaf, testIntermediate, testCA]`.
/// Nothing in the verifier uses it.
public enum TestJWSSigner {
    /// Signs `payload` (serialized with sorted keys) as `{"alg":"ES256","x5c":[base64 DER...]}` unless
    /// `header` is given, in which case exactly that header is used (to build malformed test cases).
    public static func sign(
        payload: [String: Any], chain: [[UInt8]], privateKeyPEM: String, header: [String: Any]? = nil
    ) throws -> String {
        guard JSONSerialization.isValidJSONObject(payload) else { throw CryptoError("TestJWSSigner: payload is not a JSON object") }
        let data = try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys, .withoutEscapingSlashes])
        return try sign(payload: data, chain: chain, privateKeyPEM: privateKeyPEM, header: header)
    }

    /// Signs the exact payload bytes `payload` (see the dictionary variant).
    public static func sign(payload: Data, chain: [[UInt8]], privateKeyPEM: String, header: [String: Any]? = nil) throws -> String {
        let headerObject = header ?? ["alg": "ES256", "x5c": chain.map { Data($0).base64EncodedString() }]
        guard JSONSerialization.isValidJSONObject(headerObject) else { throw CryptoError("TestJWSSigner: header is not a JSON object") }
        let headerData = try JSONSerialization.data(withJSONObject: headerObject, options: [.sortedKeys, .withoutEscapingSlashes])
        let signingInput = Base64URL.encode([UInt8](headerData)) + "." + Base64URL.encode([UInt8](payload))
        let signature = try signES256(Array(signingInput.utf8), privateKeyPEM: privateKeyPEM)
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// ECDSA P-256 / SHA-256 over `message`, returned in JOSE form (64 bytes R‖S).
    /// The key is parsed once for consecutive uses of the same PEM text (a workload signs thousands).
    public static func signES256(_ message: [UInt8], privateKeyPEM: String) throws -> [UInt8] {
        try lastKey.parsed(privateKeyPEM, ES256Signer.init(pem:)).sign(message)
    }

    private static let lastKey = LastParsedKey<ES256Signer>()

    /// Base64url without padding, as used in JWS segments.
    public static func base64URL(_ bytes: [UInt8]) -> String { Base64URL.encode(bytes) }
}
