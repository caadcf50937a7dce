import Foundation
import LedgerCrypto

/// The part of an `x5c` chain's validation that does not depend on the time: OpenSSL built a path
/// from the leaf through the intermediate to a configured root, it has exactly 3 certificates, and
/// the leaf and intermediate carry Apple's OIDs. Immutable once made, so any thread may use it.
final class ValidatedChain: @unchecked Sendable {
    let leaf: X509Certificate
    let intermediate: X509Certificate
    /// The path OpenSSL built: leaf, intermediate, trusted root.
    let path: [X509Certificate]
    /// The leaf's public key when it is an EC P-256 key, else why it cannot verify an ES256
    /// signature (the signature step of every JWS reports it).
    let leafKey: Result<PublicKey, VerificationError>
    let leafSubject: String

    init(leaf: X509Certificate, intermediate: X509Certificate, path: [X509Certificate]) throws(VerificationError) {
        self.leaf = leaf
        self.intermediate = intermediate
        self.path = path
        switch leaf.publicKey() {
        case .success(let key):
            leafKey = key.isP256 ? .success(key) : .failure(VerificationError(.verificationFailed, "leaf public key is not an EC P-256 key"))
        case .failure(let error):
            leafKey = .failure(VerificationError(.verificationFailed, "leaf public key cannot be decoded: \(error.detail)"))
        }
        leafSubject = try leaf.subject()
    }

    /// True when every certificate of the path is valid at `time` (Unix seconds), compared as
    /// `X509_verify_cert` compares: the chain validated then validates at `time` too.
    func isValid(at time: Int64) -> Bool { path.allSatisfy { $0.isValid(at: time) } }
}

/// Chain validations already made, so that a JWS whose `x5c` chain was seen before costs one
/// ECDSA verification: a bounded LRU of successful outcomes keyed by SHA-256 over the `x5c`
/// certificates' DER. Only successes are kept, and each JWS still has its chain checked at its own
/// time (``ValidatedChain/isValid(at:)``; outside it the chain is validated again, for OpenSSL's
/// exact reason), so the cache never accepts what validation would refuse. Safe to use from any
/// number of threads.
final class ChainCache: @unchecked Sendable {
    /// The most chains kept (Apple signs with a handful of leaf certificates at a time).
    let capacity: Int
    private let lock = NSLock()
    private var entries: [[UInt8]: (chain: ValidatedChain, lastUse: UInt64)] = [:]
    private var uses: UInt64 = 0
    private var found = 0
    private var notFound = 0

    init(capacity: Int = 64) { self.capacity = max(1, capacity) }

    /// The cache key of an `x5c` chain: SHA-256 over each certificate's DER, length-prefixed.
    static func key(_ certificates: [[UInt8]]) throws(VerificationError) -> [UInt8] {
        var parts: [[UInt8]] = []
        for der in certificates {
            parts.append(withUnsafeBytes(of: UInt32(truncatingIfNeeded: der.count).bigEndian) { Array($0) })
            parts.append(der)
        }
        do {
            return try Digest.sha256(parts: parts)
        } catch {
            throw VerificationError(.cryptoFailure, "\(error)")
        }
    }

    var count: Int { lock.withLock { entries.count } }
    /// Lookups that found a chain, and lookups that did not.
    var hits: Int { lock.withLock { found } }
    var misses: Int { lock.withLock { notFound } }

    func chain(for key: [UInt8]) -> ValidatedChain? {
        lock.withLock {
            uses += 1
            guard let entry = entries[key] else {
                notFound += 1
                return nil
            }
            found += 1
            entries[key]?.lastUse = uses
            return entry.chain
        }
    }

    /// Keeps `chain`, evicting the least recently used chain when full.
    func insert(_ chain: ValidatedChain, for key: [UInt8]) {
        lock.withLock {
            uses += 1
            if entries[key] == nil, entries.count >= capacity, let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse }) {
                entries[oldest.key] = nil
            }
            entries[key] = (chain, uses)
        }
    }
}
