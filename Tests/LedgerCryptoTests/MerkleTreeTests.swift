import LedgerCrypto
import Testing

/// Reference data from transparency-dev/merkle (testonly/constants.go and proof/verify_test.go), the RFC 6962 test
/// vectors shared with certificate-transparency-go and Trillian.
enum RFC6962Vectors {
    static let leafInputs: [[UInt8]] = [
        "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f",
    ].map { hx($0) }

    /// Leaf hashes (level 0 of testonly.NodeHashes()).
    static let leafHashes: [String] = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
        "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
        "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
        "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
    ]

    /// Root hashes indexed by tree size 0...8 (testonly.RootHashes()).
    static let roots: [String] = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]

    struct Inclusion: Sendable, CustomTestStringConvertible {
        /// Zero-based here (the Go vectors number leaves from 1).
        let index: Int
        let size: Int
        let proof: [String]
        var testDescription: String { "leaf \(index) of \(size)" }
    }

    static let inclusionProofs: [Inclusion] = [
        Inclusion(index: 0, size: 1, proof: []),
        Inclusion(
            index: 0, size: 8,
            proof: [
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ]),
        Inclusion(
            index: 5, size: 8,
            proof: [
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ]),
        Inclusion(
            index: 2, size: 3,
            proof: [
                "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"
            ]),
        Inclusion(
            index: 1, size: 5,
            proof: [
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ]),
    ]

    struct Consistency: Sendable, CustomTestStringConvertible {
        let oldSize: Int
        let newSize: Int
        let proof: [String]
        var testDescription: String { "\(oldSize) → \(newSize)" }
    }

    static let consistencyProofs: [Consistency] = [
        Consistency(oldSize: 1, newSize: 1, proof: []),
        Consistency(
            oldSize: 1, newSize: 8,
            proof: [
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ]),
        Consistency(
            oldSize: 6, newSize: 8,
            proof: [
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ]),
        Consistency(
            oldSize: 2, newSize: 5,
            proof: [
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ]),
        Consistency(
            oldSize: 6, newSize: 7,
            proof: [
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ]),
    ]
}

/// The RFC 6962 §2.1 recursive definition, written independently of the library's iterative one.
func referenceRoot(_ hashes: ArraySlice<[UInt8]>) throws -> [UInt8] {
    if hashes.isEmpty { return try Digest.sha256([]) }
    if hashes.count == 1 { return hashes[hashes.startIndex] }
    var k = 1
    while k * 2 < hashes.count { k *= 2 }
    let split = hashes.startIndex + k
    return try Digest.sha256([0x01], referenceRoot(hashes[..<split]), referenceRoot(hashes[split...]))
}

/// A copy of `proof` with one byte of element `element` flipped.
func flipped(_ proof: [[UInt8]], element: Int, byte: Int) -> [[UInt8]] {
    var copy = proof
    copy[element][byte % copy[element].count] ^= 0x01
    return copy
}

@Suite struct MerkleTreeTests {
    let leafHashes: [[UInt8]]

    init() throws { leafHashes = try RFC6962Vectors.leafInputs.map(MerkleTree.leafHash) }

    @Test(arguments: 0..<8)
    func leafHashMatchesVector(index: Int) throws {
        #expect(toHex(try MerkleTree.leafHash(RFC6962Vectors.leafInputs[index])) == RFC6962Vectors.leafHashes[index])
    }

    @Test(arguments: 0...8)
    func rootMatchesVector(size: Int) throws {
        #expect(toHex(try MerkleTree.root(leafHashes: Array(leafHashes.prefix(size)))) == RFC6962Vectors.roots[size])
    }

    @Test func emptyTreeRoot() throws {
        #expect(toHex(try MerkleTree.root(leafHashes: [])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(try MerkleTree.emptyRoot == MerkleTree.root(leafHashes: []))
    }

    @Test func nodeHashMatchesVector() throws {
        // testonly.NodeHashes level 1, node 0 = H(leaf 0, leaf 1).
        #expect(
            toHex(try MerkleTree.nodeHash(leafHashes[0], leafHashes[1]))
                == "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")
    }

    @Test(arguments: RFC6962Vectors.inclusionProofs)
    func inclusionProofMatchesVector(_ vector: RFC6962Vectors.Inclusion) throws {
        let tree = Array(leafHashes.prefix(vector.size))
        let proof = try MerkleTree.inclusionProof(index: vector.index, leafHashes: tree)
        #expect(proof.map(toHex) == vector.proof)
        let root = hx(RFC6962Vectors.roots[vector.size])
        let leaf = leafHashes[vector.index]
        let expected = vector.proof.map { hx($0) }
        #expect(try MerkleTree.verifyInclusion(leafHash: leaf, index: vector.index, treeSize: vector.size, proof: expected, root: root))

        // The corruptions of transparency-dev/merkle's verifierCheck must all fail.
        let someHash = hx("abacaba000000000000000000000000000000000000000000060061e00123456")
        let emptyRoot = hx(RFC6962Vectors.roots[0])
        var probes: [(String, Int, Int, [UInt8], [UInt8], [[UInt8]])] = [
            ("index - 1", vector.index - 1, vector.size, leaf, root, expected),
            ("index + 1", vector.index + 1, vector.size, leaf, root, expected),
            ("index ^ 2", vector.index ^ 2, vector.size, leaf, root, expected),
            ("size * 2", vector.index, vector.size * 2, leaf, root, expected),
            ("size / 2", vector.index, vector.size / 2, leaf, root, expected),
            ("wrong leaf", vector.index, vector.size, Array("WrongLeaf".utf8), root, expected),
            ("empty root", vector.index, vector.size, leaf, emptyRoot, expected),
            ("random root", vector.index, vector.size, leaf, someHash, expected),
            ("trailing garbage", vector.index, vector.size, leaf, root, expected + [[]]),
            ("trailing root", vector.index, vector.size, leaf, root, expected + [root]),
            ("preceding garbage", vector.index, vector.size, leaf, root, [[]] + expected),
            ("preceding root", vector.index, vector.size, leaf, root, [root] + expected),
        ]
        for i in expected.indices {
            probes.append(("flipped proof[\(i)]", vector.index, vector.size, leaf, root, flipped(expected, element: i, byte: 0)))
        }
        if !expected.isEmpty {
            probes.append(("removed component", vector.index, vector.size, leaf, root, Array(expected.dropLast())))
        }
        if expected.count > 1 {
            probes.append(
                ("inserted component", vector.index, vector.size, leaf, root, [expected[0], someHash] + expected.dropFirst()))
        }
        for (name, index, size, leafHash, root, proof) in probes {
            #expect(
                try !MerkleTree.verifyInclusion(leafHash: leafHash, index: index, treeSize: size, proof: proof, root: root),
                "\(name) should not verify")
        }
    }

    @Test(arguments: RFC6962Vectors.consistencyProofs)
    func consistencyProofMatchesVector(_ vector: RFC6962Vectors.Consistency) throws {
        let proof = try MerkleTree.consistencyProof(oldSize: vector.oldSize, leafHashes: Array(leafHashes.prefix(vector.newSize)))
        #expect(proof.map(toHex) == vector.proof)
        let oldRoot = hx(RFC6962Vectors.roots[vector.oldSize])
        let newRoot = hx(RFC6962Vectors.roots[vector.newSize])
        let expected = vector.proof.map { hx($0) }
        #expect(
            try MerkleTree.verifyConsistency(
                oldSize: vector.oldSize, newSize: vector.newSize, oldRoot: oldRoot, newRoot: newRoot, proof: expected))
        guard !expected.isEmpty else { return }

        // The corruptions of transparency-dev/merkle's verifierConsistencyCheck must all fail.
        let (m, n) = (vector.oldSize, vector.newSize)
        let wrongRoot = Array("WrongRoot".utf8)
        var probes: [(String, Int, Int, [UInt8], [UInt8], [[UInt8]])] = [
            ("size1 - 1", m - 1, n, oldRoot, newRoot, expected),
            ("size1 + 1", m + 1, n, oldRoot, newRoot, expected),
            ("size1 ^ 2", m ^ 2, n, oldRoot, newRoot, expected),
            ("size2 * 2", m, n * 2, oldRoot, newRoot, expected),
            ("size2 / 2", m, n / 2, oldRoot, newRoot, expected),
            ("wrong root1", m, n, wrongRoot, newRoot, expected),
            ("wrong root2", m, n, oldRoot, wrongRoot, expected),
            ("swapped roots", m, n, newRoot, oldRoot, expected),
            ("empty proof", m, n, oldRoot, newRoot, []),
            ("trailing garbage", m, n, oldRoot, newRoot, expected + [[]]),
            ("trailing root1", m, n, oldRoot, newRoot, expected + [oldRoot]),
            ("trailing root2", m, n, oldRoot, newRoot, expected + [newRoot]),
            ("preceding garbage", m, n, oldRoot, newRoot, [[]] + expected),
            ("preceding root1", m, n, oldRoot, newRoot, [oldRoot] + expected),
            ("preceding root2", m, n, oldRoot, newRoot, [newRoot] + expected),
            ("preceding proof[0]", m, n, oldRoot, newRoot, [expected[0]] + expected),
            ("truncated proof", m, n, oldRoot, newRoot, Array(expected.dropLast())),
        ]
        for i in expected.indices {
            probes.append(("flipped proof[\(i)]", m, n, oldRoot, newRoot, flipped(expected, element: i, byte: 0)))
        }
        for (name, oldSize, newSize, oldRoot, newRoot, proof) in probes {
            #expect(
                try !MerkleTree.verifyConsistency(oldSize: oldSize, newSize: newSize, oldRoot: oldRoot, newRoot: newRoot, proof: proof),
                "\(name) should not verify")
        }
    }

    @Test func invalidArgumentsGiveFalseOrEmpty() throws {
        let root8 = hx(RFC6962Vectors.roots[8])
        let root5 = hx(RFC6962Vectors.roots[5])
        let empty = hx(RFC6962Vectors.roots[0])
        // Inclusion proofs for indices outside the tree are empty, and nothing verifies there.
        for index in [-1, 8, 9, Int.max, Int.min] {
            #expect(try MerkleTree.inclusionProof(index: index, leafHashes: leafHashes).isEmpty)
            #expect(try !MerkleTree.verifyInclusion(leafHash: leafHashes[0], index: index, treeSize: 8, proof: [], root: root8))
        }
        #expect(try MerkleTree.inclusionProof(index: 0, leafHashes: []).isEmpty)
        for (index, size) in [(0, 0), (1, 0), (2, 1), (0, -1), (-1, -1), (0, Int.min), (Int.max, Int.max)] {
            #expect(try !MerkleTree.verifyInclusion(leafHash: leafHashes[0], index: index, treeSize: size, proof: [], root: empty))
        }
        // Huge sizes with a short proof fail rather than overflow.
        #expect(try !MerkleTree.verifyInclusion(leafHash: leafHashes[0], index: Int.max - 1, treeSize: Int.max, proof: [root8], root: root8))
        // Hashes of the wrong length never verify, even for the one-leaf tree where root == leaf hash.
        #expect(try MerkleTree.verifyInclusion(leafHash: leafHashes[0], index: 0, treeSize: 1, proof: [], root: leafHashes[0]))
        #expect(try !MerkleTree.verifyInclusion(leafHash: [], index: 0, treeSize: 1, proof: [], root: []))
        #expect(try !MerkleTree.verifyInclusion(leafHash: [1, 2], index: 0, treeSize: 1, proof: [], root: [1, 2]))

        // Consistency: oldSize 0, shrinking trees and sizes beyond the tree give an empty proof / false.
        #expect(try MerkleTree.consistencyProof(oldSize: 0, leafHashes: leafHashes).isEmpty)
        #expect(try MerkleTree.consistencyProof(oldSize: -3, leafHashes: leafHashes).isEmpty)
        #expect(try MerkleTree.consistencyProof(oldSize: 9, leafHashes: leafHashes).isEmpty)
        #expect(try MerkleTree.consistencyProof(oldSize: 8, leafHashes: leafHashes).isEmpty)
        #expect(try MerkleTree.consistencyProof(oldSize: 1, leafHashes: []).isEmpty)
        #expect(try !MerkleTree.verifyConsistency(oldSize: 0, newSize: 8, oldRoot: empty, newRoot: root8, proof: []))
        #expect(try !MerkleTree.verifyConsistency(oldSize: 0, newSize: 0, oldRoot: empty, newRoot: empty, proof: []))
        #expect(try !MerkleTree.verifyConsistency(oldSize: 8, newSize: 5, oldRoot: root8, newRoot: root5, proof: []))
        #expect(try !MerkleTree.verifyConsistency(oldSize: -1, newSize: 5, oldRoot: root8, newRoot: root5, proof: []))
        #expect(try !MerkleTree.verifyConsistency(oldSize: 1, newSize: Int.max, oldRoot: leafHashes[0], newRoot: root8, proof: [root8]))
        // Equal sizes: only equal roots with an empty proof.
        #expect(try MerkleTree.verifyConsistency(oldSize: 8, newSize: 8, oldRoot: root8, newRoot: root8, proof: []))
        #expect(try !MerkleTree.verifyConsistency(oldSize: 8, newSize: 8, oldRoot: root8, newRoot: root5, proof: []))
        #expect(try !MerkleTree.verifyConsistency(oldSize: 8, newSize: 8, oldRoot: root8, newRoot: root8, proof: [empty]))
        #expect(try !MerkleTree.verifyConsistency(oldSize: 5, newSize: 8, oldRoot: [], newRoot: [], proof: []))
    }

    /// Every proof in seeded random trees of 1...200 leaves verifies, and corrupted ones do not.
    @Test(arguments: 1...200)
    func randomizedTree(size: Int) throws {
        var random = SeededRandom(seed: 0x5eed_0000 + UInt64(size))
        // Distinct leaves (index prefix), so a wrong index can never coincide with an equal sibling.
        let leaves = try (0..<size).map { index in
            try MerkleTree.leafHash(withUnsafeBytes(of: UInt32(index).bigEndian, Array.init) + random.bytes(Int.random(in: 0...40, using: &random)))
        }
        let roots = try (0...size).map { try MerkleTree.root(leafHashes: Array(leaves.prefix($0))) }
        let root = roots[size]
        #expect(try root == referenceRoot(leaves[...]))
        #expect(try roots[size - 1] == referenceRoot(leaves.dropLast()))

        for index in 0..<size {
            let proof = try MerkleTree.inclusionProof(index: index, leafHashes: leaves)
            guard try MerkleTree.verifyInclusion(leafHash: leaves[index], index: index, treeSize: size, proof: proof, root: root) else {
                Issue.record("inclusion proof for leaf \(index) of \(size) does not verify")
                continue
            }
            for element in proof.indices {
                let bad = flipped(proof, element: element, byte: index + element)
                #expect(try !MerkleTree.verifyInclusion(leafHash: leaves[index], index: index, treeSize: size, proof: bad, root: root))
            }
            for wrongIndex in Set([index - 1, index + 1, index ^ 1, index ^ 2, index ^ 4]) where wrongIndex != index {
                #expect(
                    try !MerkleTree.verifyInclusion(leafHash: leaves[index], index: wrongIndex, treeSize: size, proof: proof, root: root),
                    "leaf \(index) of \(size) verified at index \(wrongIndex)")
            }
            for wrongSize in [size * 2, size / 2] where wrongSize != size {
                #expect(
                    try !MerkleTree.verifyInclusion(leafHash: leaves[index], index: index, treeSize: wrongSize, proof: proof, root: root),
                    "leaf \(index) of \(size) verified with size \(wrongSize)")
            }
            #expect(try !MerkleTree.verifyInclusion(leafHash: leaves[index], index: index, treeSize: size, proof: proof + [root], root: root))
            if !proof.isEmpty {
                #expect(try !MerkleTree.verifyInclusion(leafHash: leaves[index], index: index, treeSize: size, proof: proof.dropLast(), root: root))
            }
        }

        for oldSize in 1...size {
            let proof = try MerkleTree.consistencyProof(oldSize: oldSize, leafHashes: leaves)
            let oldRoot = roots[oldSize]
            guard try MerkleTree.verifyConsistency(oldSize: oldSize, newSize: size, oldRoot: oldRoot, newRoot: root, proof: proof) else {
                Issue.record("consistency proof \(oldSize) → \(size) does not verify")
                continue
            }
            if oldSize == size {
                #expect(proof.isEmpty)
                continue
            }
            for element in proof.indices {
                let bad = flipped(proof, element: element, byte: oldSize + element)
                #expect(try !MerkleTree.verifyConsistency(oldSize: oldSize, newSize: size, oldRoot: oldRoot, newRoot: root, proof: bad))
            }
            for wrongOld in [oldSize - 1, oldSize + 1, oldSize ^ 2] where wrongOld != oldSize {
                #expect(
                    try !MerkleTree.verifyConsistency(oldSize: wrongOld, newSize: size, oldRoot: oldRoot, newRoot: root, proof: proof),
                    "\(oldSize) → \(size) verified as \(wrongOld) → \(size)")
            }
            for wrongNew in [size * 2, size / 2] where wrongNew != size {
                #expect(
                    try !MerkleTree.verifyConsistency(oldSize: oldSize, newSize: wrongNew, oldRoot: oldRoot, newRoot: root, proof: proof),
                    "\(oldSize) → \(size) verified as \(oldSize) → \(wrongNew)")
            }
            #expect(try !MerkleTree.verifyConsistency(oldSize: oldSize, newSize: size, oldRoot: root, newRoot: oldRoot, proof: proof))
            #expect(try !MerkleTree.verifyConsistency(oldSize: oldSize, newSize: size, oldRoot: oldRoot, newRoot: root, proof: proof.dropLast()))
            #expect(try !MerkleTree.verifyConsistency(oldSize: oldSize, newSize: size, oldRoot: oldRoot, newRoot: root, proof: proof + [root]))
            if oldSize > 1 {
                #expect(try !MerkleTree.verifyConsistency(oldSize: oldSize, newSize: size, oldRoot: roots[oldSize - 1], newRoot: root, proof: proof))
            }
        }
    }

    /// The iterative root handles a million leaves, and agrees with the recursive definition.
    @Test func rootOfAMillionLeaves() throws {
        let count = 1_000_003
        let leaves = (0..<count).map { index in
            withUnsafeBytes(of: UInt64(index).bigEndian, Array.init) + [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: 24)
        }
        let clock = ContinuousClock()
        var root: [UInt8] = []
        let elapsed = try clock.measure { root = try MerkleTree.root(leafHashes: leaves) }
        print("root of \(count) leaves in \(elapsed)")
        #expect(try root == referenceRoot(leaves[...]))
        #expect(try MerkleTree.inclusionProof(index: count - 1, leafHashes: leaves).count <= 20)
        let proof = try MerkleTree.inclusionProof(index: 777_777, leafHashes: leaves)
        #expect(try MerkleTree.verifyInclusion(leafHash: leaves[777_777], index: 777_777, treeSize: count, proof: proof, root: root))
    }
}
