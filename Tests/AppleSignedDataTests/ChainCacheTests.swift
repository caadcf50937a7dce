import Foundation
import LedgerCrypto
import Testing

@testable import AppleSignedData

/// Apple chains are validated once per distinct JWS header (its exact bytes, `x5c` included); the
/// cache never accepts what a verifier without it would refuse, and one verifier serves many threads.
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

    /// The cache is keyed by the header segment's exact bytes: a header that differs in one byte of its
    /// `x5c`, or spells the same chain differently, misses and is verified in full.
    @Test func aHeaderThatDiffersInAnyByteIsVerifiedInFull() throws {
        let verifier = try Vectors.verifier()
        #expect(outcome(verifier, try sign()).hasPrefix("ok"))
        #expect(verifier.chains.misses == 1)
        // One bit of the leaf's own signature flipped: the certificate still parses, the chain does not validate.
        var leaf = Vectors.testLeaf
        leaf[leaf.count - 8] ^= 0x01
        let tampered = outcome(verifier, try sign(chain: [leaf, Vectors.testIntermediate, Vectors.testCA]))
        #expect(tampered.hasPrefix("invalid-chain"), "\(tampered)")
        #expect(tampered == outcome(try Vectors.verifier(), try sign(chain: [leaf, Vectors.testIntermediate, Vectors.testCA])))
        #expect(verifier.chains.misses == 2)
        #expect(verifier.chains.count == 1, "a chain that did not validate is not kept")
        // The same chain under a header with one more member: verified in full, kept apart.
        let x5c = Vectors.goodChain.map { Data($0).base64EncodedString() }
        let spelledOtherwise = try Vectors.sign(Vectors.transactionPayload(), header: ["alg": "ES256", "x5c": x5c, "typ": "JWT"])
        #expect(outcome(verifier, spelledOtherwise).hasPrefix("ok"))
        #expect(verifier.chains.misses == 3)
        #expect(verifier.chains.count == 2)
        // A header with a forbidden member is refused whatever the cache holds for its chain.
        let critical = try Vectors.sign(Vectors.transactionPayload(), header: ["alg": "ES256", "x5c": x5c, "crit": ["exp"]])
        #expect(outcome(verifier, critical).hasPrefix("invalid-jws-format"))
        #expect(verifier.chains.count == 2)
    }

    /// A known header spares the chain's validation only: the signature, the payload and the identity
    /// checks run for every JWS.
    @Test func aJWSWithAKnownHeaderHasItsSignatureAndPayloadChecked() throws {
        let verifier = try Vectors.verifier()
        let good = try sign()
        #expect(outcome(verifier, good).hasPrefix("ok"))
        let parts = good.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        let otherPayload = try JSONSerialization.data(
            withJSONObject: Vectors.transactionPayload(["transactionId": "9999"]), options: [.sortedKeys, .withoutEscapingSlashes])
        let swapped = [parts[0], Base64URL.encode([UInt8](otherPayload)), parts[2]].joined(separator: ".")
        let refused = outcome(verifier, swapped)
        #expect(refused.hasPrefix("verification-failed"), "\(refused)")
        var signature = try #require(Base64URL.decode(parts[2]))
        signature[5] ^= 0x01
        #expect(outcome(verifier, [parts[0], parts[1], Base64URL.encode(signature)].joined(separator: ".")).hasPrefix("verification-failed"))
        #expect(outcome(verifier, try Vectors.sign(Vectors.transactionPayload(["bundleId": "com.other"]))).hasPrefix("invalid-app-identifier"))
        #expect(outcome(verifier, try Vectors.sign(Vectors.transactionPayload(["environment": "Production"]))).hasPrefix("invalid-environment"))
        #expect(verifier.chains.hits == 4)
        #expect(verifier.chains.count == 1)
    }

    /// Each certificate's validity as seconds agrees with OpenSSL's comparison around both edges.
    @Test func theValidityRangeIsOpenSSLsComparison() throws {
        for der in Vectors.goodChain {
            let certificate = try #require(X509Certificate(der: der))
            let range = try #require(certificate.validitySeconds())
            for time in [range.lowerBound - 1, range.lowerBound, range.lowerBound + 1, range.upperBound - 1, range.upperBound] {
                #expect(range.contains(time) == certificate.isValid(at: time), "at \(time)")
            }
        }
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
