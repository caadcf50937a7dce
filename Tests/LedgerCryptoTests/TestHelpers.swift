import Foundation
import Testing

/// Decodes hex written in a test; an invalid literal records a test issue and yields no bytes.
func hx(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> [UInt8] {
    let chars = Array(text.utf8)
    func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
    guard chars.count % 2 == 0 else {
        Issue.record("odd-length hex literal \(text)", sourceLocation: sourceLocation)
        return []
    }
    var out: [UInt8] = []
    var index = 0
    while index < chars.count {
        guard let high = nibble(chars[index]), let low = nibble(chars[index + 1]) else {
            Issue.record("bad hex literal \(text)", sourceLocation: sourceLocation)
            return []
        }
        out.append(high << 4 | low)
        index += 2
    }
    return out
}

func toHex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

/// SplitMix64: a small deterministic generator so randomized tests are reproducible.
struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) } }
}
