import LedgerCrypto
import LedgerTestSupport
import Testing

/// Decodes hex written in a test; an invalid literal records a test issue and yields no bytes.
func hx(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> [UInt8] {
    guard let bytes = [UInt8](hex: text) else {
        Issue.record("bad hex literal \(text)", sourceLocation: sourceLocation)
        return []
    }
    return bytes
}

func toHex(_ bytes: [UInt8]) -> String { bytes.hex }

/// The shared seeded generator, under the name these tests use.
typealias SeededRandom = SeededGenerator

extension SeededGenerator {
    init(seed: UInt64) { self.init(state: seed) }

    mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) } }
}
