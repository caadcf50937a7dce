// libFuzzer harness for release evidence files (`ledger evidence verify` reads files from strangers). The
// first byte picks how: 0 verifies the bytes as they are against a fixed key; 1 first re-signs whatever JSON
// object they hold (checkpoint and file signature) with that key, so mutated records, proofs, checkpoints and
// scenario claims get past the signature checks to the decoders and the scenario rules. Either way the
// verdict is a result or a ReleaseEvidence.Failure: never a trap, never a libcrypto error; a verified file's
// instances name only records the checkpoint holds.
import Foundation

@testable import OwnershipLedger

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEvidence(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let input = fuzzInput(start, count)
    guard let mode = input.first, let signer = bundleSigner else { return 0 }
    let bytes = Array(input.dropFirst())
    let labels = [ReleaseEvidence.format: ReleaseEvidence.signatureLabel]
    guard let data = mode % 2 == 0 ? Data(bytes) : resigned(bytes, by: signer, labels: labels) else { return 0 }
    do {
        let verified = try ReleaseEvidence.verify(data, publicKey: signer.publicKey)
        expect(
            verified.instances.allSatisfy { $0.sequences.allSatisfy { $0 >= 1 && $0 <= verified.checkpointSize } },
            "an instance names a record outside the checkpoint")
        expect(verified.instances.count + verified.missing.count == ReleaseEvidence.Scenario.allCases.count, "a scenario is unaccounted for")
    } catch {
        expect(error is ReleaseEvidence.Failure, "not a ReleaseEvidence.Failure: \(error)")
    }
    return 0
}
