// Re-signing for the harnesses of signed files from strangers (dispute bundles, release evidence),
// compiled into every harness (fuzz.sh).
import Foundation
import LedgerCrypto

@testable import OwnershipLedger

/// The fixed key the bundle harnesses verify against.
let bundleSigner = try? Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 9, count: 32))

/// `bytes` re-signed by `key` when they hold a JSON object (nil otherwise): its checkpoint re-signed,
/// its public key replaced by `key`'s, and the file signed after the label `labels` gives its format
/// (the first label for an unknown one), so mutated records, proofs and checkpoints get past the
/// signature checks to the decoders.
func resigned(_ bytes: [UInt8], by key: Ed25519PrivateKey, labels: [String: String]) -> Data? {
    guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)), var bundle = object as? [String: Any] else { return nil }
    bundle.removeValue(forKey: "bundleSignature")
    bundle["publicKey"] = key.publicKey.pem
    if let text = bundle["checkpoint"] as? String, let parsed = try? Checkpoint.parse(text),
        let signed = try? parsed.checkpoint.signed(by: key, keyName: parsed.checkpoint.origin)
    {
        bundle["checkpoint"] = signed
    }
    let label = (bundle["format"] as? String).flatMap { labels[$0] } ?? labels.values.sorted().first ?? ""
    return try? SignedBundle.seal(bundle, label: label, signer: key)
}
