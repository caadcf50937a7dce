import AppStoreServerAPI
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A blocking HTTP client for tests, on the API client's ``HTTPTransport`` (the toolchain's URLSession).
public final class HTTPClient: Sendable {
    public struct Response: Sendable {
        public var status: Int
        /// Header names lower-cased.
        public var headers: [String: String]
        public var body: Data
        public var text: String { String(decoding: body, as: UTF8.self) }
        /// The body as a JSON object (empty when it is not one).
        public var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
    }

    public let base: URL
    private let transport: HTTPTransport

    /// A client for `http://127.0.0.1:port` (or `base`), with up to `connections` keep-alive connections.
    public convenience init(port: UInt16, scheme: String = "http", connections: Int = 8) throws {
        guard let base = URL(string: "\(scheme)://127.0.0.1:\(port)") else { throw URLError(.badURL) }
        self.init(base: base, connections: connections)
    }

    public init(base: URL, connections: Int = 8) {
        self.base = base
        transport = HTTPTransport(timeoutSeconds: 30, connections: connections)
    }

    /// Sends one request and waits for its response.
    public func send(_ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil) throws -> Response {
        guard let url = URL(string: path, relativeTo: base) else { throw URLError(.badURL) }
        var request = URLRequest(url: url)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = body
        let response = try transport.send(request)
        return Response(status: response.status, headers: response.headers, body: response.body)
    }

    public func get(_ path: String, headers: [String: String] = [:]) throws -> Response { try send("GET", path, headers: headers) }

    public func post(_ path: String, _ body: String, headers: [String: String] = [:]) throws -> Response {
        try send("POST", path, headers: headers, body: Data(body.utf8))
    }
}

/// A raw TCP connection to a local server, to send exactly the bytes a test needs (slow, partial or
/// oversized requests) and read whatever comes back.
public final class RawConnection: @unchecked Sendable {
    private let socket: Int32

    public init(port: UInt16) throws {
        socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        // Not closed here: an initializer that throws once every property is set still runs
        // deinit, and a second close(2) would close whatever descriptor reused the number, such
        // as another test's server socket or its epoll or wake-up descriptor (seen: libmicrohttpd
        // panicking "Close socket failed", or a daemon thread never woken by MHD_stop_daemon).
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
    }

    /// Closes the socket: the one close(2), also when `init` threw after creating it.
    deinit { if socket >= 0 { close(socket) } }

    /// Writes `text`; false when the server has closed the connection.
    @discardableResult
    public func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Foundation.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }

    /// The answer to `request` (which should ask to close) on a new connection to `port`, tried
    /// again while connections are refused unanswered (the server still freeing closed slots)
    /// for up to `within` seconds.
    public static func answer(to request: String, port: UInt16, within: Double) throws -> String {
        let deadline = Date().addingTimeInterval(within)
        while true {
            let connection = try RawConnection(port: port)
            connection.send(request)
            let answer = connection.readUntilClosed(timeout: 20).text
            if !answer.isEmpty || Date() >= deadline { return answer }
            usleep(100_000)
        }
    }

    /// Everything received until the server closes the connection or `timeout` seconds pass;
    /// `closed` tells which.
    public func readUntilClosed(timeout: Double) -> (text: String, closed: Bool) {
        var received: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0 else { return (String(decoding: received, as: UTF8.self), false) }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, Int32(remaining * 1000) + 1) > 0 else { continue }
            let count = recv(socket, &buffer, buffer.count, 0)
            if count <= 0 { return (String(decoding: received, as: UTF8.self), true) }
            received += buffer[0..<count]
        }
    }
}

/// The `curl` tool (installed by `make deps`), for what URLSession cannot do in tests: TLS with a
/// test certificate authority and chosen protocol versions.
public enum Curl {
    public static func run(_ arguments: [String]) throws -> LedgerBinary.Result {
        try LedgerBinary.runProcess(URL(fileURLWithPath: "/usr/bin/env"), ["curl", "--max-time", "20"] + arguments)
    }
}

/// Runs `body(0..<count)` on `count` threads at once (blocking work such as HTTP requests, which
/// `DispatchQueue.concurrentPerform` would run only a core's worth at a time) and returns the results in order.
public func concurrently<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
    let results = ConcurrentResults<T>()
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            let value = body(index)
            results.lock.withLock { results.values[index] = value }
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    group.wait()
    return (0..<count).compactMap { results.values[$0] }
}

private final class ConcurrentResults<T>: @unchecked Sendable {
    let lock = NSLock()
    var values: [Int: T] = [:]
}
