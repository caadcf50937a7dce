import Foundation
import OwnershipLedger
import Testing

/// The splitter `ledger submit` reads standard input with: line breaks, limits and batches.
@Suite struct LineBatchesTests {
    /// Every line `input` splits into, read `chunk` bytes at a time from a pipe, batches at most `limit` lines.
    func lines(_ input: String, maximum: Int, chunk: Int = 1 << 16, limit: Int = 100) throws -> [InputLine] {
        var descriptors: [Int32] = [0, 0]
        try #require(pipe(&descriptors) == 0)
        let bytes = Array(input.utf8)
        let written = bytes.withUnsafeBytes { write(descriptors[1], $0.baseAddress, $0.count) }
        try #require(written == bytes.count)
        close(descriptors[1])
        defer { close(descriptors[0]) }
        var reader = LineBatches(fileDescriptor: descriptors[0], maximumLineBytes: maximum, chunkBytes: chunk)
        var lines: [InputLine] = []
        while let batch = reader.next(upTo: limit) {
            #expect(!batch.isEmpty && batch.count <= limit)
            lines += batch
        }
        #expect(reader.readError == nil)
        return lines
    }

    func text(_ line: String) -> InputLine { .bytes(Array(line.utf8)) }
    let tooLong = InputLine.unreadable("line is longer than 4 bytes")

    @Test func crlfAndLfEndLinesAndALastLineNeedsNoBreak() throws {
        #expect(try lines("ab\r\ncd\n\nef", maximum: 4) == [text("ab"), text("cd"), text(""), text("ef")])
        #expect(try lines("ab\n", maximum: 4) == [text("ab")])
        #expect(try lines("", maximum: 4) == [])
    }

    @Test func aLineOverTheLimitIsUnreadableHoweverItArrives() throws {
        for chunk in [1, 2, 3, 5, 1 << 16] {
            // Complete within one read, split across reads, and the last line without a break.
            let read = try lines("abcde\nabcd\nabcdefghij\nxy\nabcdef", maximum: 4, chunk: chunk)
            #expect(read == [tooLong, text("abcd"), tooLong, text("xy"), tooLong], "chunk \(chunk)")
            // A CR before the LF is not part of the line, even when it arrives alone at the limit.
            #expect(try lines("abcd\r\nabcde\r\n", maximum: 4, chunk: chunk) == [text("abcd"), tooLong], "chunk \(chunk)")
            // A full batch leaves an oversized partial line for the next one (found by LineBatchesFuzzer).
            #expect(try lines("ab\nabcdefghij", maximum: 4, chunk: chunk, limit: 1) == [text("ab"), tooLong], "chunk \(chunk)")
        }
    }

    @Test func batchesHoldAtMostTheLimitAndLoseNothing() throws {
        let input = (0..<50).map { "line \($0)" }.joined(separator: "\n")
        for (chunk, limit) in [(1, 1), (7, 3), (64, 16), (1 << 16, 7)] {
            #expect(try lines(input, maximum: 100, chunk: chunk, limit: limit) == (0..<50).map { text("line \($0)") })
        }
    }
}
