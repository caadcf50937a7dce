// libFuzzer harness for signed checkpoints (`ledger verify --checkpoint FILE` and `ledger restore`'s
// checkpoint.txt come from outside):
// any text must parse or throw, never trap. A checkpoint that parses has exactly one spelling (its body
// renders back to the bytes it was parsed from), and re-signed with a test key it verifies to itself.
import LedgerCrypto
import OwnershipLedger

let signer = try? Ed25519PrivateKey(rawRepresentation: [UInt8](repeating: 7, count: 32))

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCheckpoint(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let text = String(decoding: fuzzInput(start, count), as: UTF8.self)
    if let signer { _ = try? Checkpoint.verify(text, publicKey: signer.publicKey, keyName: "fuzz") }
    guard let (checkpoint, _) = try? Checkpoint.parse(text) else { return 0 }
    expect(text.utf8.starts(with: Array(checkpoint.body.utf8) + [0x0a]), "the parsed checkpoint's body is not the text it came from")
    for line in checkpoint.extensions {
        _ = Forensics.parseStateLine(line)
        // `ledger restore` reads the backup's data line: one spelling per value.
        if let data = Backup.parseDataLine(line) {
            expect(Backup.dataLine(bytes: data.bytes, sha256: data.sha256) == line, "a backup data line does not render back to itself")
        }
    }
    guard let signer, let signed = try? checkpoint.signed(by: signer, keyName: "fuzz") else { return 0 }
    let verified = try? Checkpoint.verify(signed, publicKey: signer.publicKey, keyName: "fuzz")
    expect(verified == checkpoint, "a re-signed checkpoint does not verify to itself")
    return 0
}
