// libFuzzer harness for the line splitter `ledger submit` reads standard input with (`LineBatches`).
// The first byte picks the line limit (0–63 bytes), the second the read size (1–64 bytes) and the third
// the batch limit (1–16 lines), so short inputs reach oversized lines, lines split across reads and
// full batches; the rest is the input, read from a file. Properties: every batch holds 1…limit lines,
// and the lines are exactly those of a reference split (on LF, a CR before it dropped, a last line
// without LF kept, a line over the limit unreadable) — nothing lost, merged or invented.
import Foundation
import OwnershipLedger

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLineBatches(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    guard bytes.count >= 3 else { return 0 }
    let maximum = Int(bytes[0] % 64)
    let chunk = Int(bytes[1] % 64) + 1
    let limit = Int(bytes[2] % 16) + 1
    let input = Array(bytes[3...])

    var expected: [InputLine] = []
    var segments = input.split(separator: 0x0A, omittingEmptySubsequences: false)
    if segments.last?.isEmpty == true { segments.removeLast() }
    for segment in segments { expected.append(InputLine(segment, maximumBytes: maximum)) }

    let path = FileManager.default.temporaryDirectory.appendingPathComponent("line-batches-fuzz-\(getpid())").path
    guard FileManager.default.createFile(atPath: path, contents: Data(input)) else { return 0 }
    let descriptor = open(path, O_RDONLY)
    defer {
        close(descriptor)
        unlink(path)
    }
    var reader = LineBatches(fileDescriptor: descriptor, maximumLineBytes: maximum, chunkBytes: chunk)
    var lines: [InputLine] = []
    while let batch = reader.next(upTo: limit) {
        expect(!batch.isEmpty && batch.count <= limit, "a batch of \(batch.count) lines with limit \(limit)")
        lines += batch
    }
    expect(reader.readError == nil, "read error \(reader.readError ?? "")")
    expect(lines == expected, "lines \(lines) != expected \(expected)")
    return 0
}
