// libFuzzer harness for dispute bundles (`ledger dispute verify` reads files from strangers). The first byte
// picks how: 0 verifies the bytes as they are against a fixed key; 1 first re-signs whatever JSON object they
// hold (checkpoint and bundle signature) with that key, so mutated records, proofs and checkpoints get past
// the signature checks to the decoders. Either way the verdict is a result or a DisputeBundle.Failure: never a
// trap, never a libcrypto error.
import Foundation

@testable import OwnershipLedger

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDisputeBundle(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = fuzzInput(start, count)
    guard let mode = input.first, let signer = bundleSigner else { return 0 }
    let bytes = Array(input.dropFirst())
    guard let data = mode % 2 == 0 ? Data(bytes) : resigned(bytes, by: signer, labels: DisputeBundle.signatureLabels) else { return 0 }
    do {
        let verified = try DisputeBundle.verify(data, publicKey: signer.publicKey)
        expect(verified.records.count + verified.withheld.count <= verified.checkpointSize, "more records than the checkpoint holds")
    } catch {
        expect(error is DisputeBundle.Failure, "not a DisputeBundle.Failure: \(error)")
    }
    return 0
}
