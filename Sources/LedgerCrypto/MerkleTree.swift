/// RFC 6962 / RFC 9162 Merkle tree hashing, inclusion proofs and consistency proofs over SHA-256.
///
/// Trees are given as arrays of leaf hashes (see ``leafHash(_:)``), leaf 0 first. Hashes are 32 bytes;
/// verification rejects any hash of another length. Invalid arguments (an index outside the tree, a size
/// that is zero or shrinking) give `false` or an empty proof, never a trap. Every function throws
/// ``CryptoError`` when libcrypto fails to hash (never a zero hash).
public enum MerkleTree {
    /// The RFC 6962 leaf hash: SHA-256(0x00 ‖ data).
    public static func leafHash(_ data: [UInt8]) throws -> [UInt8] { try Digest.sha256([0x00], data) }

    /// The RFC 6962 interior node hash: SHA-256(0x01 ‖ left ‖ right).
    public static func nodeHash(_ left: [UInt8], _ right: [UInt8]) throws -> [UInt8] { try Digest.sha256([0x01], left, right) }

    /// The root of the empty tree: SHA-256 of the empty string.
    public static var emptyRoot: [UInt8] { get throws { try Digest.sha256([]) } }

    /// The Merkle tree hash (MTH) of the tree whose leaves have these hashes; ``emptyRoot`` for no leaves.
    /// Iterative, O(n) hashes and O(n) temporary memory.
    public static func root(leafHashes: [[UInt8]]) throws -> [UInt8] {
        try subtreeRoot(leafHashes, 0, leafHashes.count, NodeHasher())
    }

    /// The audit path (RFC 6962 §2.1.1 PATH) for leaf `index` in the tree of `leafHashes`, nearest sibling first.
    /// Empty for a one-leaf tree, or when `index` is outside the tree. O(n) hashes, O(log n) proof length.
    public static func inclusionProof(index: Int, leafHashes: [[UInt8]]) throws -> [[UInt8]] {
        let hasher = try NodeHasher()
        return try inclusionProof(index: index, size: leafHashes.count) { try subtreeRoot(leafHashes, $0, $1, hasher) }
    }

    /// The audit path for leaf `index` in a tree of `size` leaves, given `subtree(lo, hi)`: the MTH of
    /// leaves [lo, hi). Every range asked for is either a perfect subtree (a power of two, aligned to
    /// its size) or the tree's right edge, so a log can answer from stored nodes. O(log n) calls.
    public static func inclusionProof(index: Int, size: Int, subtree: (Int, Int) throws -> [UInt8]) throws -> [[UInt8]] {
        guard index >= 0, index < size else { return [] }
        var proof: [[UInt8]] = []
        try path(index, 0, size, subtree, into: &proof)
        return proof
    }

    /// Verifies an inclusion proof as in RFC 9162 §2.1.3.2: that `leafHash` is leaf `index` of the tree of
    /// `treeSize` leaves whose root is `root`. O(log n).
    public static func verifyInclusion(leafHash: [UInt8], index: Int, treeSize: Int, proof: [[UInt8]], root: [UInt8]) throws -> Bool {
        guard index >= 0, index < treeSize, leafHash.count == 32, root.count == 32,
            proof.allSatisfy({ $0.count == 32 })
        else { return false }
        var fn = index
        var sn = treeSize - 1
        var r = leafHash
        for p in proof {
            if sn == 0 { return false }
            if fn & 1 == 1 || fn == sn {
                r = try nodeHash(p, r)
                while fn & 1 == 0 && fn != 0 {
                    fn >>= 1
                    sn >>= 1
                }
            } else {
                r = try nodeHash(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && r == root
    }

    /// The consistency proof (RFC 6962 §2.1.2 PROOF) that the tree of the first `oldSize` leaves is a prefix of
    /// the tree of all `leafHashes`. Empty when the sizes are equal, and when `oldSize` is 0 or larger than the
    /// tree (invalid). O(n) hashes, O(log n) proof length.
    public static func consistencyProof(oldSize: Int, leafHashes: [[UInt8]]) throws -> [[UInt8]] {
        let hasher = try NodeHasher()
        return try consistencyProof(oldSize: oldSize, size: leafHashes.count) { try subtreeRoot(leafHashes, $0, $1, hasher) }
    }

    /// The consistency proof from `oldSize` to `size` leaves, given `subtree(lo, hi)` as for
    /// ``inclusionProof(index:size:subtree:)``. O(log n) calls.
    public static func consistencyProof(oldSize: Int, size: Int, subtree: (Int, Int) throws -> [UInt8]) throws -> [[UInt8]] {
        guard oldSize > 0, oldSize < size else { return [] }
        var proof: [[UInt8]] = []
        try subproof(oldSize, 0, size, complete: true, subtree, into: &proof)
        return proof
    }

    /// Verifies a consistency proof as in RFC 9162 §2.1.4.2: that the tree of `oldSize` leaves with root `oldRoot`
    /// is a prefix of the tree of `newSize` leaves with root `newRoot`. Equal sizes need equal roots and an empty
    /// proof. False when `oldSize` is 0 (nothing to prove) or exceeds `newSize`. O(log n).
    public static func verifyConsistency(oldSize: Int, newSize: Int, oldRoot: [UInt8], newRoot: [UInt8], proof: [[UInt8]]) throws -> Bool {
        guard oldSize > 0, oldSize <= newSize, oldRoot.count == 32, newRoot.count == 32,
            proof.allSatisfy({ $0.count == 32 })
        else { return false }
        if oldSize == newSize { return proof.isEmpty && oldRoot == newRoot }
        guard !proof.isEmpty else { return false }
        var path = proof
        if oldSize & (oldSize - 1) == 0 { path.insert(oldRoot, at: 0) }
        var fn = oldSize - 1
        var sn = newSize - 1
        while fn & 1 == 1 {
            fn >>= 1
            sn >>= 1
        }
        var fr = path[0]
        var sr = path[0]
        for c in path.dropFirst() {
            if sn == 0 { return false }
            if fn & 1 == 1 || fn == sn {
                fr = try nodeHash(c, fr)
                sr = try nodeHash(c, sr)
                while fn & 1 == 0 && fn != 0 {
                    fn >>= 1
                    sn >>= 1
                }
            } else {
                sr = try nodeHash(sr, c)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && fr == oldRoot && sr == newRoot
    }

    // MARK: - Internals over the half-open range [lo, hi) of the leaf array

    /// The largest power of two strictly less than `n` (n ≥ 2).
    public static func splitPoint(_ n: Int) -> Int {
        var k = 1
        while k << 1 < n { k <<= 1 }
        return k
    }

    /// MTH of leaves [lo, hi), bottom-up: pair neighbours, carry an odd last node up unchanged. This equals the
    /// RFC 6962 recursive definition (split at the largest power of two below n).
    public static func subtreeRoot(_ leaves: [[UInt8]], _ lo: Int, _ hi: Int) throws -> [UInt8] {
        try subtreeRoot(leaves, lo, hi, NodeHasher())
    }

    static func subtreeRoot(_ leaves: [[UInt8]], _ lo: Int, _ hi: Int, _ hasher: NodeHasher) throws -> [UInt8] {
        let count = hi - lo
        if count <= 0 { return try emptyRoot }
        if count == 1 { return leaves[lo] }
        var level: [[UInt8]] = []
        level.reserveCapacity((count + 1) / 2)
        var i = lo
        while i + 1 < hi {
            level.append(try hasher.node(leaves[i], leaves[i + 1]))
            i += 2
        }
        if i < hi { level.append(leaves[i]) }
        while level.count > 1 {
            var write = 0
            var read = 0
            while read + 1 < level.count {
                level[write] = try hasher.node(level[read], level[read + 1])
                write += 1
                read += 2
            }
            if read < level.count {
                level[write] = level[read]
                write += 1
            }
            level.removeLast(level.count - write)
        }
        return level[0]
    }

    /// RFC 6962 PATH(m, D[lo:hi]), appended leaf-side first.
    static func path(_ m: Int, _ lo: Int, _ hi: Int, _ subtree: (Int, Int) throws -> [UInt8], into proof: inout [[UInt8]]) throws {
        let n = hi - lo
        guard n > 1 else { return }
        let k = splitPoint(n)
        if m < k {
            try path(m, lo, lo + k, subtree, into: &proof)
            proof.append(try subtree(lo + k, hi))
        } else {
            try path(m - k, lo + k, hi, subtree, into: &proof)
            proof.append(try subtree(lo, lo + k))
        }
    }

    /// RFC 6962 SUBPROOF(m, D[lo:hi], b), appended leaf-side first.
    static func subproof(
        _ m: Int, _ lo: Int, _ hi: Int, complete: Bool, _ subtree: (Int, Int) throws -> [UInt8], into proof: inout [[UInt8]]
    ) throws {
        let n = hi - lo
        if m == n {
            if !complete { proof.append(try subtree(lo, hi)) }
            return
        }
        let k = splitPoint(n)
        if m <= k {
            try subproof(m, lo, lo + k, complete: complete, subtree, into: &proof)
            proof.append(try subtree(lo + k, hi))
        } else {
            try subproof(m - k, lo + k, hi, complete: false, subtree, into: &proof)
            proof.append(try subtree(lo, lo + k))
        }
    }
}

/// Hashes interior nodes with one reused SHA-256 context, which saves an allocation per node when
/// building large trees.
final class NodeHasher {
    private let hasher: SHA256Hasher

    init() throws { hasher = try SHA256Hasher() }

    /// SHA-256(0x01 ‖ left ‖ right).
    func node(_ left: [UInt8], _ right: [UInt8]) throws -> [UInt8] {
        try hasher.begin()
        try hasher.update([0x01])
        try hasher.update(left)
        try hasher.update(right)
        return try hasher.finish()
    }
}
