import Foundation
import Testing

@testable import AppleSignedData

/// Apple chains are validated once per distinct `x5c` chain; the cache never accepts what a
/// verifier without it would refuse, and one verifier serves many threads.
@Suite struct ChainCacheTests {
    func sign(signedDate: Int64 = Vectors.nowMs, chain: [[UInt8]]? = nil) throws -> String {
        try Vectors.sign(Vectors.transactionPayload(["signedDate": signedDate]), chain: chain)
    }

    func outcome(_ verifier: SignedDataVerifier, _ jws: String) -> String {
        switch verifier.verifyTransaction(jws, now: Vectors.nowMs) {
        case .success(let transaction): "ok \(transaction.signedDate)"
        case .failure(let error): error.description
        }
    }

    @Test func aJWSWithAKnownChainCostsNoChainValidation() throws {
        let verifier = try Vectors.verifier()
        for offset in 0..<10 {
            #expect(throws: Never.self) { try verifier.verifyTransaction(try sign(signedDate: Vectors.nowMs + Int64(offset)), now: 0).get() }
        }
        #expect(verifier.chains.count == 1)
        #expect(verifier.chains.misses == 1)
        #expect(verifier.chains.hits == 9)
    }

    @Test func anExpiredOrNotYetValidJWSIsRefusedAfterItsChainWasCached() throws {
        let verifier = try Vectors.verifier()
        #expect(outcome(verifier, try sign()).hasPrefix("ok"))
        #expect(verifier.chains.count == 1)
        let expired = outcome(verifier, try sign(signedDate: 2_280_946_846_000))
        #expect(expired.hasPrefix("invalid-chain") && expired.contains("certificate has expired"), "\(expired)")
        let early = outcome(verifier, try sign(signedDate: 1_600_000_000_000))
        #expect(early.hasPrefix("invalid-chain") && early.contains("not yet valid"), "\(early)")
        #expect(outcome(verifier, try sign()).hasPrefix("ok"))
    }

    /// The last second (searching between `valid` and `invalid`) at which a verifier without a cache still accepts.
    func boundary(valid: Int64, invalid: Int64) throws -> Int64 {
        var (good, bad) = (valid, invalid)
        while abs(bad - good) > 1 {
            let middle = good + (bad - good) / 2
            let fresh = try Vectors.verifier()
            if case .success = fresh.verifyTransaction(try sign(signedDate: middle * 1000), now: 0) { good = middle } else { bad = middle }
        }
        return good
    }

    @Test func atEveryValidityBoundaryTheCachedVerdictIsTheUncachedOne() throws {
        let last = try boundary(valid: Vectors.effectiveDate, invalid: 2_280_946_846)
        let first = try boundary(valid: Vectors.effectiveDate, invalid: 1_600_000_000)
        let cached = try Vectors.verifier()
        _ = cached.verifyTransaction(try sign(), now: 0)
        for seconds in [first - 1, first, first + 1, last - 1, last, last + 1] {
            for millis in [seconds * 1000, seconds * 1000 + 999] {
                let jws = try sign(signedDate: millis)
                #expect(outcome(cached, jws) == outcome(try Vectors.verifier(), jws), "at \(millis)")
            }
        }
        #expect(outcome(cached, try sign(signedDate: last * 1000)).hasPrefix("ok"))
        #expect(outcome(cached, try sign(signedDate: (last + 1) * 1000)).contains("expired"))
        #expect(cached.chains.count == 1)
    }

    @Test func onlyValidatedChainsAreKeptAndTheLeastRecentlyUsedGoesFirst() throws {
        let verifier = try SignedDataVerifier(
            configuration: VerifierConfiguration(
                bundleId: "com.example", environment: .sandbox, rootCertificates: [Vectors.testCA]), cachedChains: 2)
        // x5c[2] is never used, so each of these is a valid chain with its own cache key.
        let chains = [Vectors.testCA, Vectors.testIntermediate, Vectors.testLeaf].map { [Vectors.testLeaf, Vectors.testIntermediate, $0] }
        let jws = try chains.map { try sign(chain: $0) }
        _ = verifier.verifyTransaction(try sign(chain: [Vectors.testIntermediate, Vectors.testCA, Vectors.testCA]), now: 0)
        _ = verifier.verifyTransaction(try sign(signedDate: 2_280_946_846_000), now: 0)
        #expect(verifier.chains.count == 0, "a chain that did not validate is not kept")
        for token in jws { #expect(outcome(verifier, token).hasPrefix("ok")) }
        #expect(verifier.chains.count == 2)
        let misses = verifier.chains.misses
        _ = verifier.verifyTransaction(jws[2], now: 0)
        #expect(verifier.chains.misses == misses, "the most recent chain is kept")
        _ = verifier.verifyTransaction(jws[0], now: 0)
        #expect(verifier.chains.misses == misses + 1, "the oldest chain was evicted")
    }

    @Test func oneVerifierGivesEveryThreadTheSingleThreadedVerdicts() throws {
        let inputs = [
            try sign(), try sign(signedDate: 2_280_946_846_000), try sign(signedDate: 1_600_000_000_000),
            try sign(chain: [Vectors.testLeaf, Vectors.testIntermediate, Vectors.testLeaf]),
            try Vectors.sign(Vectors.transactionPayload(["bundleId": "com.other"])),
            String(try sign().dropLast(2)) + "AA",
        ]
        let expected = try inputs.map { outcome(try Vectors.verifier(), $0) }
        let shared = try Vectors.verifier()
        let results = Results(count: 8 * 120)
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for round in 0..<120 {
                let index = (thread + round) % inputs.count
                results.set(thread * 120 + round, outcome(shared, inputs[index]) == expected[index])
            }
        }
        #expect(results.all)
        #expect(shared.chains.count == 2)
    }
}

/// Results written from many threads.
final class Results: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Bool]
    init(count: Int) { values = Array(repeating: false, count: count) }
    func set(_ index: Int, _ value: Bool) { lock.withLock { values[index] = value } }
    var all: Bool { lock.withLock { values.allSatisfy { $0 } } }
}
