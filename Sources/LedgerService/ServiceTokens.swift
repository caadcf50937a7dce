import Foundation
import LedgerCrypto

/// The bearer tokens that may call `POST /v1/submit`, from `--service-token-file`: one token a
/// line (blank lines ignored), the file readable by its owner only (mode 0600 or stricter).
/// Candidates are compared in constant time against every token.
public struct ServiceTokens: Sendable {
    /// The shortest token accepted (e.g. `openssl rand -hex 32` makes 64 characters).
    public static let minimumLength = 32
    public static let maximumFileBytes = 1 << 20
    /// SHA-256 of each token: comparing digests makes every comparison the same length.
    private let digests: [[UInt8]]
    /// How tokens and candidates are hashed: libcrypto's SHA-256 (a test gives one that fails).
    private let hash: @Sendable ([UInt8]) throws -> [UInt8]

    /// The tokens in the file at `path`.
    /// - Throws: ``ServiceTokenError`` naming what is wrong (unreadable, readable by others, a bad line).
    public init(contentsOf path: String) throws(ServiceTokenError) {
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw ServiceTokenError("cannot read the service token file \(path): \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & 0o077 == 0 else {
            throw ServiceTokenError(
                "the service token file \(path) is readable by others (mode \(String(status.st_mode & 0o777, radix: 8))); chmod 600 it")
        }
        guard Int(status.st_size) <= Self.maximumFileBytes else {
            throw ServiceTokenError("the service token file \(path) is larger than \(Self.maximumFileBytes) bytes")
        }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ServiceTokenError("cannot read the service token file \(path): \(error.localizedDescription)")
        }
        try self.init(parsing: [UInt8](data))
    }

    /// The tokens in `contents` (the file's bytes).
    public init(parsing contents: [UInt8]) throws(ServiceTokenError) {
        try self.init(parsing: contents) { bytes in try Digest.sha256(bytes) }
    }

    /// The tokens in `contents`, hashed with `hash` (libcrypto's SHA-256 but in tests).
    init(parsing contents: [UInt8], hash: @escaping @Sendable ([UInt8]) throws -> [UInt8]) throws(ServiceTokenError) {
        var digests: [[UInt8]] = []
        for (index, rawLine) in contents.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            var line = rawLine[...]
            while let last = line.last, last == UInt8(ascii: "\r") || last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") {
                line = line.dropLast()
            }
            while let first = line.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") { line = line.dropFirst() }
            guard !line.isEmpty else { continue }
            guard line.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw ServiceTokenError("line \(index + 1) of the service token file has characters other than printable ASCII")
            }
            guard line.count >= Self.minimumLength else {
                throw ServiceTokenError(
                    "line \(index + 1) of the service token file is shorter than \(Self.minimumLength) characters (make one with `openssl rand -hex 32`)"
                )
            }
            do {
                digests.append(try hash(Array(line)))
            } catch {
                throw ServiceTokenError("the service tokens could not be hashed: \(error)")
            }
        }
        guard !digests.isEmpty else { throw ServiceTokenError("the service token file holds no token") }
        self.digests = digests
        self.hash = hash
    }

    /// Whether `candidate` is one of the tokens. Every token is compared, each in constant time.
    /// - Throws: the libcrypto failure (``CryptoError``) when the candidate cannot be hashed: no
    ///   verdict on the token, a fault of the server (`ledger serve` answers 500, not 401).
    public func accepts(_ candidate: String) throws -> Bool {
        let digest = try hash(Array(candidate.utf8))
        var matched: UInt8 = 0
        for token in digests {
            var difference: UInt8 = 0
            for (a, b) in zip(token, digest) { difference |= a ^ b }
            matched |= difference == 0 ? 1 : 0
        }
        return matched == 1
    }
}

/// Why the service token file was refused.
public struct ServiceTokenError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
