import Foundation
import LedgerCrypto
import StrictJSON

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
    /// The Unix seconds at which every certificate of the path is valid (the intersection of their
    /// ``X509Certificate/validitySeconds()``); nil when one of them has no such range, and then
    /// ``isValid(at:)`` asks OpenSSL for each certificate on each use.
    let validity: Range<Int64>?

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
        var validity: Range<Int64>? = Int64.min..<Int64.max
        for certificate in path {
            guard let current = validity, let range = certificate.validitySeconds(), range.overlaps(current) else {
                validity = nil
                break
            }
            validity = current.clamped(to: range)
        }
        self.validity = validity
    }

    /// True when every certificate of the path is valid at `time` (Unix seconds), compared as
    /// `X509_verify_cert` compares: the chain validated then validates at `time` too.
    func isValid(at time: Int64) -> Bool {
        if let validity { return validity.contains(time) }
        return path.allSatisfy { $0.isValid(at: time) }
    }
}

/// JWS headers already verified, so that a JWS whose header was seen before costs one ECDSA
/// verification: a bounded LRU of successful outcomes keyed by the header segment's exact bytes
/// (the base64url text before the first dot, which holds `alg` and the `x5c` chain). Equal bytes
/// decode to the same header and the same certificates, so the header's checks (alg, crit, x5c) and
/// the chain's validation hold for it as they did; only successes are kept. Each JWS still has its
/// chain checked at its own time (``ValidatedChain/isValid(at:)``; outside it the chain is validated
/// again, for OpenSSL's exact reason), its signature verified and its payload checked, so the cache
/// never accepts what verification without it would refuse. Safe to use from any number of threads.
final class ChainCache: @unchecked Sendable {
    /// A verified header and the chain its `x5c` validated to.
    struct Entry {
        let header: JSONMembers
        let chain: ValidatedChain
    }

    /// A header segment's bytes, hashed in one pass (an array hashes element by element).
    struct Key: Hashable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }

        static func == (lhs: Key, rhs: Key) -> Bool {
            guard lhs.bytes.count == rhs.bytes.count else { return false }
            return lhs.bytes.withUnsafeBytes { left in
                rhs.bytes.withUnsafeBytes { right in
                    guard let left = left.baseAddress, let right = right.baseAddress else { return true }  // both empty
                    return memcmp(left, right, lhs.bytes.count) == 0
                }
            }
        }
    }

    /// The most headers kept (Apple signs with a handful of leaf certificates at a time).
    let capacity: Int
    private let lock = NSLock()
    private var entries: [Key: (entry: Entry, lastUse: UInt64)] = [:]
    private var uses: UInt64 = 0
    private var found = 0
    private var notFound = 0

    init(capacity: Int = 64) { self.capacity = max(1, capacity) }

    var count: Int { lock.withLock { entries.count } }
    /// Lookups that found a header, and lookups that did not.
    var hits: Int { lock.withLock { found } }
    var misses: Int { lock.withLock { notFound } }

    /// The entry of the header segment `header` (its exact bytes), if it verified before.
    func entry(for header: UnsafeBufferPointer<UInt8>) -> Entry? {
        let key = Key(bytes: Array(header))
        return lock.withLock {
            uses += 1
            // One hash of the (kilobytes long) key: found by index, then updated in place.
            guard let index = entries.index(forKey: key) else {
                notFound += 1
                return nil
            }
            found += 1
            entries.values[index].lastUse = uses
            return entries.values[index].entry
        }
    }

    /// Keeps `entry` for the header segment `header`, evicting the least recently used entry when full.
    func insert(_ entry: Entry, for header: UnsafeBufferPointer<UInt8>) {
        let key = Key(bytes: Array(header))
        lock.withLock {
            uses += 1
            if entries[key] == nil, entries.count >= capacity, let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse }) {
                entries[oldest.key] = nil
            }
            entries[key] = (entry, uses)
        }
    }
}
