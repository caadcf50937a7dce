import Foundation

/// One input line as read: its bytes (without the line break), or why it cannot be read (too long).
public enum InputLine: Equatable, Sendable {
    case bytes([UInt8])
    case unreadable(String)

    /// The line's bytes; nil when it is unreadable.
    public var bytes: [UInt8]? {
        if case .bytes(let bytes) = self { return bytes }
        return nil
    }

    /// A line without its LF: a CR before the LF belongs to the line break (CRLF), and a line longer
    /// than `maximumBytes` without it is unreadable, however it arrived.
    public init(_ raw: ArraySlice<UInt8>, maximumBytes: Int) {
        let bytes = raw.last == UInt8(ascii: "\r") ? raw.dropLast() : raw
        self = bytes.count > maximumBytes ? .unreadable("line is longer than \(maximumBytes) bytes") : .bytes(Array(bytes))
    }
}

/// Reads lines from a file descriptor in batches of whatever has already arrived, so a stream of
/// submissions shares one commit (group commit) while a verifier that sends one line and waits for
/// its answer is answered at once. Memory stays bounded by `maximumLineBytes` plus one read: the rest
/// of an oversized line is skipped as it arrives.
public struct LineBatches: Sendable {
    public let fileDescriptor: Int32
    public let maximumLineBytes: Int
    private let chunkBytes: Int
    private var buffer: [UInt8] = []
    private var endOfInput = false
    /// Why reading the descriptor failed, if it did (not the end of input).
    public private(set) var readError: String?
    /// Set while discarding the rest of an oversized line.
    private var discarding = false

    /// - Parameter chunkBytes: the most one `read(2)` asks for.
    public init(fileDescriptor: Int32, maximumLineBytes: Int, chunkBytes: Int = 1 << 16) {
        self.fileDescriptor = fileDescriptor
        self.maximumLineBytes = maximumLineBytes
        self.chunkBytes = max(1, chunkBytes)
    }

    /// The next lines (at most `limit`, at least one), waiting for at least one; nil at the end of input.
    /// A last line without a line break is a line; blank lines are returned as they are.
    public mutating func next(upTo limit: Int) -> [InputLine]? {
        let limit = max(1, limit)
        var lines: [InputLine] = []
        while lines.isEmpty {
            take(into: &lines, limit: limit)
            if !lines.isEmpty { break }
            if endOfInput {
                guard !buffer.isEmpty else { return nil }
                lines.append(InputLine(buffer[...], maximumBytes: maximumLineBytes))
                buffer.removeAll()
                break
            }
            readChunk()
        }
        while lines.count < limit && !endOfInput && inputIsReady() {
            readChunk()
            take(into: &lines, limit: limit)
        }
        return lines
    }

    private mutating func take(into lines: inout [InputLine], limit: Int) {
        var start = 0
        while lines.count < limit, let newline = lineFeed(from: start) {
            if discarding {
                discarding = false
            } else {
                lines.append(InputLine(buffer[start..<newline], maximumBytes: maximumLineBytes))
            }
            start = newline + 1
        }
        buffer.removeFirst(start)
        // A partial line longer than the limit plus a CR can only end too long: answer it now (when the
        // batch has room) and skip the rest of it, rather than buffer it.
        let tooLong = buffer.count > maximumLineBytes + 1 && lineFeed(from: 0) == nil
        if tooLong && !discarding && lines.count < limit {
            lines.append(.unreadable("line is longer than \(maximumLineBytes) bytes"))
            buffer.removeAll()
            discarding = true
        } else if discarding && lineFeed(from: 0) == nil {
            buffer.removeAll()
        }
    }

    /// The index of the first line feed in the buffer at or after `start` (`memchr`, not a loop over the bytes).
    private func lineFeed(from start: Int) -> Int? {
        buffer.withUnsafeBufferPointer { bytes in
            guard start < bytes.count, let base = bytes.baseAddress, let found = memchr(base + start, 0x0A, bytes.count - start) else { return nil }
            return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
        }
    }

    private mutating func readChunk() {
        var chunk = [UInt8](repeating: 0, count: chunkBytes)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fileDescriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                buffer.append(contentsOf: chunk[0..<count])
                return
            }
            if count == 0 {
                endOfInput = true
                return
            }
            switch errno {
            case EINTR: continue
            case EAGAIN:
                // A non-blocking descriptor with nothing yet: wait for input rather than stop.
                var descriptor = pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)
                _ = poll(&descriptor, 1, -1)
            default:
                readError = String(cString: strerror(errno))
                endOfInput = true
                return
            }
        }
    }

    private func inputIsReady() -> Bool {
        var descriptor = pollfd(fd: fileDescriptor, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, 0) > 0
    }
}
