import COpenSSL

/// Cryptographically secure random bytes drawn from libcrypto's generator (`RAND_bytes`) a block at
/// a time, so that many small draws (a write group's new pseudonyms and their seals' nonces) cost one
/// call per block instead of one each. Every byte handed out is the generator's and is handed out
/// once; bytes left in a block too short for a draw are dropped, never reused. For one thread at a
/// time (a reference, so no copy can hand out the same bytes twice).
public final class RandomPool {
    /// Bytes drawn per `RAND_bytes` call (a draw larger than this takes a block of its own size).
    public let blockSize: Int
    private var block: [UInt8] = []
    private var next = 0

    public init(blockSize: Int) { self.blockSize = max(1, blockSize) }

    /// Writes `count` fresh random bytes at `destination`.
    public func fill(_ destination: UnsafeMutablePointer<UInt8>, count: Int) throws {
        if block.count - next < count {
            let size = max(blockSize, count)
            let length = try int32Length(size, "RAND_bytes")
            if block.count != size { block = [UInt8](repeating: 0, count: size) }
            try check(RAND_bytes(&block, length), "RAND_bytes")
            next = 0
        }
        block.withUnsafeBufferPointer { source in
            guard let base = source.baseAddress else { return }
            destination.update(from: base + next, count: count)
        }
        next += count
    }

    /// `count` fresh random bytes.
    public func bytes(_ count: Int) throws -> [UInt8] {
        try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            if let base = buffer.baseAddress { try fill(base, count: count) }
            initialized = count
        }
    }
}
