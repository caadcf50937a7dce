import Foundation
import LedgerCrypto
import LedgerTestSupport
import Testing

@testable import AppleSignedData

@Suite struct FuzzTests {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ {}\"\u{0}é")

    func mutate(_ input: [Character], _ rng: inout SeededGenerator) -> [Character] {
        var chars = input
        for _ in 0..<Int.random(in: 1...3, using: &rng) {
            guard !chars.isEmpty else { break }
            let index = Int.random(in: 0..<chars.count, using: &rng)
            switch Int.random(in: 0..<6, using: &rng) {
            case 0: chars[index] = Self.alphabet.randomElement(using: &rng) ?? "A"
            case 1: chars.remove(at: index)
            case 2: chars.insert(Self.alphabet.randomElement(using: &rng) ?? "A", at: index)
            case 3: chars.swapAt(index, Int.random(in: 0..<chars.count, using: &rng))
            case 4: chars = Array(chars.prefix(index))
            default: chars.insert(contentsOf: chars[index..<min(chars.count, index + 8)], at: index)
            }
        }
        return chars
    }

    @Test func randomMutationsNeverCrashAndNeverVerify() throws {
        let verifier = try Vectors.verifier()
        let valid = try Vectors.sign(Vectors.transactionPayload())
        #expect(throws: Never.self) { try verifier.verifyTransaction(valid, now: 0).get() }
        let notification = try Vectors.string("jws/testNotification.jws")
        var rng = SeededGenerator(state: 0x5EED_1234)
        var tried = 0
        for round in 0..<4000 {
            let source = round % 4 == 0 ? notification : valid
            let mutated = String(mutate(Array(source), &rng))
            guard mutated != source else { continue }
            tried += 1
            #expect(verifier.verifyTransaction(mutated, now: Vectors.nowMs).failure != nil, "\(mutated)")
            #expect(verifier.verifyNotification(mutated, now: Vectors.nowMs).failure != nil || mutated == notification)
            if round % 8 == 0 { _ = verifier.inspect(mutated, now: Vectors.nowMs) }
        }
        #expect(tried > 3500)
    }

    @Test func randomBytesNeverCrash() throws {
        let verifier = try Vectors.verifier()
        var rng = SeededGenerator(state: 42)
        for _ in 0..<500 {
            let segments = (0..<3).map { _ in
                Base64URL.encode((0..<Int.random(in: 0..<80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) })
            }
            #expect(verifier.verifyTransaction(segments.joined(separator: "."), now: 0).failure != nil)
        }
        // Valid JSON shapes with hostile values.
        for header in [
            #"{"alg":"ES256","x5c":[]}"#, #"{"alg":"ES256","x5c":[null,null,null]}"#, #"{"alg":["ES256"]}"#,
            #"{"alg":"ES256","x5c":["","",""]}"#, #"{"alg":"ES256","x5c":{"a":1}}"#,
        ] {
            let payload = #"{"signedDate":"x","bundleId":7,"environment":[]}"#
            let jws = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8)) + ".AAAA"
            #expect(verifier.verifyTransaction(jws, now: 0).failure != nil)
            #expect(verifier.inspect(jws, now: 0).failure != nil)
        }
    }
}
