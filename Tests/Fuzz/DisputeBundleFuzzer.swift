// libFuzzer harness for dispute bundles (`ledger dispute verify` reads files from strangers). The first byte
// picks how: 0 verifies the bytes as they are against a fixed key; 1 first re-signs whatever JSON object they
// hold (checkpoint and bundle signature) with that key, so mutated records, proofs and checkpoints get past
// the signature checks to the decoders. Either way the verdict is a result or a DisputeBundle.Failure: never a
// trap, never a libcrypto error.
import Foundation
import LedgerCrypto

@testable import OwnershipLedger

let signer = try? Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 9, count: 32))

/// `bytes` re-signed by `key` when they hold a JSON object (nil otherwise).
func resigned(_ bytes: [UInt8], by key: Ed25519PrivateKey) -> Data? {
    guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)), var bundle = object as? [String: Any] else { return nil }
    bundle.removeValue(forKey: "bundleSignature")
    bundle["publicKey"] = key.publicKey.pem
    if let text = bundle["checkpoint"] as? String, let parsed = try? Checkpoint.parse(text),
        let signed = try? parsed.checkpoint.signed(by: key, keyName: parsed.checkpoint.origin)
    {
        bundle["checkpoint"] = signed
    }
    guard let signature = try? key.sign(DisputeBundle.signedBytes(bundle)) else { return nil }
    bundle["bundleSignature"] = Data(signature).base64EncodedString()
    return try? DisputeBundle.canonical(bundle) + Data("\n".utf8)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDisputeBundle(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = fuzzInput(start, count)
    guard let mode = input.first, let signer else { return 0 }
    let bytes = Array(input.dropFirst())
    guard let data = mode % 2 == 0 ? Data(bytes) : resigned(bytes, by: signer) else { return 0 }
    do {
        let verified = try DisputeBundle.verify(data, publicKey: signer.publicKey)
        expect(verified.records.count + verified.withheld.count <= verified.checkpointSize, "more records than the checkpoint holds")
    } catch {
        expect(error is DisputeBundle.Failure, "not a DisputeBundle.Failure: \(error)")
    }
    return 0
}
