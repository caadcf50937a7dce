import CMicroHTTPD
import Foundation

/// An HTTP/1.1 (and HTTPS) server on libmicrohttpd. A few threads multiplex every connection with
/// epoll, so a slow or idle client holds no thread; a handler may answer later from any thread
/// (the connection is suspended meanwhile). libmicrohttpd parses HTTP; this layer reads bodies
/// within limits, dispatches complete requests and drains on shutdown.
///
/// ```swift
/// let server = try HTTPServer(configuration: .init(port: 0)) { request in .json(200, "{}") }
/// print(server.port)
/// server.shutdown()
/// ```
public final class HTTPServer: Sendable {
    /// Where and how to listen, and the limits every connection is held to.
    public struct Configuration: Sendable {
        /// An IPv4 or IPv6 address or a host name to listen on.
        public var host: String
        /// The port; 0 binds any free port (read it back from ``HTTPServer/port``).
        public var port: UInt16
        /// Serve HTTPS (TLS 1.2 or later) with this certificate chain and key, both PEM.
        public var tls: TLS?
        /// Threads serving connections.
        public var threads: Int
        /// The longest request body accepted; a longer one is answered 413.
        public var maximumBodyBytes: Int
        /// A request's own body limit, decided from its method, path and headers before the body
        /// is read (e.g. larger for an authenticated route); ``maximumBodyBytes`` when nil.
        public var bodyLimit: (@Sendable (HTTPRequest) -> Int)?
        /// Memory per connection for the request line, headers and buffers: larger headers are
        /// refused by libmicrohttpd (431).
        public var connectionMemoryBytes: Int
        /// Connections open at once; further ones are closed as they are accepted.
        public var maximumConnections: Int
        /// Connections open at once from one client IP address (0: no limit); further ones from it
        /// are closed as they are accepted. Behind a proxy every connection comes from the proxy.
        public var maximumConnectionsPerAddress: Int
        /// A connection idle this many seconds (nothing received while a request is incomplete,
        /// or nothing sent on an idle keep-alive connection) is closed.
        public var idleTimeoutSeconds: Int
        /// A request's line and headers (and, with TLS, the handshake) must arrive within this many
        /// seconds of the connection's opening, or on a keep-alive connection of the first byte
        /// received after the previous answer; a slower client is disconnected.
        public var headerTimeoutSeconds: Double
        /// The whole body must arrive within this many seconds of the headers; a slower client is
        /// disconnected.
        public var bodyTimeoutSeconds: Double
        /// Told of every connection the server itself closes before an answer (for metrics), before
        /// the client can see it closed; called with the server's connection table locked (keep it short).
        public var onConnectionRefused: (@Sendable (ConnectionRefusal) -> Void)?

        public init(
            host: String = "127.0.0.1", port: UInt16 = 0, tls: TLS? = nil,
            threads: Int = max(2, ProcessInfo.processInfo.activeProcessorCount), maximumBodyBytes: Int = 1 << 20,
            bodyLimit: (@Sendable (HTTPRequest) -> Int)? = nil, connectionMemoryBytes: Int = 32 << 10, maximumConnections: Int = 1024,
            maximumConnectionsPerAddress: Int = 128, idleTimeoutSeconds: Int = 30, headerTimeoutSeconds: Double = 10,
            bodyTimeoutSeconds: Double = 30, onConnectionRefused: (@Sendable (ConnectionRefusal) -> Void)? = nil
        ) {
            self.host = host
            self.port = port
            self.tls = tls
            self.threads = threads
            self.maximumBodyBytes = maximumBodyBytes
            self.bodyLimit = bodyLimit
            self.connectionMemoryBytes = connectionMemoryBytes
            self.maximumConnections = maximumConnections
            self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
            self.idleTimeoutSeconds = idleTimeoutSeconds
            self.headerTimeoutSeconds = headerTimeoutSeconds
            self.bodyTimeoutSeconds = bodyTimeoutSeconds
            self.onConnectionRefused = onConnectionRefused
        }
    }

    /// Why the server closed a connection before answering it.
    public enum ConnectionRefusal: String, Sendable {
        /// Accepted while ``Configuration/maximumConnections`` were open.
        case connectionLimit = "connection-limit"
        /// Its request line and headers missed ``Configuration/headerTimeoutSeconds``.
        case headerDeadline = "header-deadline"
    }

    /// A PEM certificate chain (leaf first) and its PEM private key.
    public struct TLS: Sendable {
        public var certificatePEM: String
        public var keyPEM: String
        public init(certificatePEM: String, keyPEM: String) {
            self.certificatePEM = certificatePEM
            self.keyPEM = keyPEM
        }
    }

    /// One finished request, for logs and metrics.
    public struct Completion: Sendable {
        public var method: String
        public var path: String
        /// The status sent; nil when the connection ended first (timeout, client gone, refused body).
        public var status: Int?
        /// From the request's complete headers to the end of the response.
        public var seconds: Double
        /// The response's ``HTTPResponse/note``.
        public var note: String?
    }

    /// Receives each complete request; answers through the responder, now or later.
    public typealias Handler = @Sendable (HTTPRequest, HTTPResponder) -> Void

    /// The port the server listens on.
    public let port: UInt16
    private let core: ServerCore
    private let daemon: Daemon

    /// Starts serving. `handler` runs on a server thread: do quick work there and hand slow work
    /// elsewhere, answering later. `observer` sees every finished request.
    ///
    /// The process ignores `SIGPIPE` from then on: a client that closes its connection while the
    /// answer is being written must not end the process.
    public init(
        configuration: Configuration, observer: (@Sendable (Completion) -> Void)? = nil, handler: @escaping Handler
    ) throws(HTTPServerError) {
        signal(SIGPIPE, SIG_IGN)
        core = ServerCore(configuration: configuration, handler: handler, observer: observer)
        daemon = try Daemon(core: core)
        port = daemon.port
    }

    /// Starts serving with a handler that answers at once.
    public convenience init(
        configuration: Configuration, observer: (@Sendable (Completion) -> Void)? = nil,
        respond: @escaping @Sendable (HTTPRequest) -> HTTPResponse
    ) throws(HTTPServerError) {
        try self.init(configuration: configuration, observer: observer) { request, responder in responder.respond(respond(request)) }
    }

    /// Requests received and not yet finished.
    public var requestsInFlight: Int { core.liveCount }

    /// Stops accepting connections. Requests whose headers arrive afterwards on open connections
    /// are answered 503 with `Connection: close`; requests already received (counted in
    /// ``requestsInFlight``, even while their body is still arriving) go on.
    public func quiesce() { daemon.quiesce() }

    /// Quiesces, waits up to `grace` seconds for requests in flight to be answered and sent,
    /// answers any still pending 503, then closes every connection. Idempotent.
    public func shutdown(grace: Double = 30) {
        daemon.quiesce()
        let deadline = Date().addingTimeInterval(grace)
        while core.liveCount > 0 && Date() < deadline { usleep(2_000) }
        daemon.stop()
    }
}

/// Why the server could not start.
public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// The libmicrohttpd daemon: started in `init`, stopped once.
private final class Daemon: @unchecked Sendable {
    let port: UInt16
    private let core: ServerCore
    private let lock = NSLock()
    private var handle: OpaquePointer?
    /// The listening socket once quiesced: closed only after the daemon stops (its threads may still use it).
    private var listeningSocket: Int32?
    /// C strings handed to libmicrohttpd, kept until the daemon stops.
    private var retained: [UnsafeMutablePointer<CChar>] = []
    /// Signalled to end the header-deadline watchdog, which signals `watchdogEnded` as it ends.
    private let watchdogStop = DispatchSemaphore(value: 0)
    private let watchdogEnded = DispatchSemaphore(value: 0)

    init(core: ServerCore) throws(HTTPServerError) {
        self.core = core
        let configuration = core.configuration
        var address = try Self.resolve(configuration.host, port: configuration.port)
        var flags = UInt32(MHD_USE_EPOLL_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue)
        if address.ss_family == sa_family_t(AF_INET6) { flags |= UInt32(MHD_USE_IPv6.rawValue) }
        func item(_ option: MHD_OPTION, _ value: Int = 0, _ pointer: UnsafeMutableRawPointer? = nil) -> MHD_OptionItem {
            MHD_OptionItem(option: option, value: value, ptr_value: pointer)
        }
        let context = Unmanaged.passUnretained(core).toOpaque()
        // The connection limit is kept by the accept policy (``ServerCore/hasRoomForConnection``),
        // which closes a connection over it as it is accepted. libmicrohttpd's own limit is set
        // above it: a daemon thread at that limit stops accepting, and connections then wait in
        // the kernel's listen backlog instead of being refused. Its threads each take a share of
        // it, and may accept at once (hence the margin of one per thread).
        let threads = max(1, configuration.threads)
        var options = [
            item(.EXTERNAL_LOGGER, unsafeBitCast(daemonMessage, to: Int.self), context),
            item(.CONNECTION_MEMORY_LIMIT, max(8 << 10, configuration.connectionMemoryBytes)),
            item(.CONNECTION_LIMIT, max(1, configuration.maximumConnections) + 2 * threads),
            item(.CONNECTION_TIMEOUT, max(1, configuration.idleTimeoutSeconds)),
            item(.NOTIFY_COMPLETED, unsafeBitCast(requestCompleted, to: Int.self), context),
            item(.NOTIFY_CONNECTION, unsafeBitCast(connectionChanged, to: Int.self), context),
        ]
        if configuration.maximumConnectionsPerAddress > 0 {
            options.append(item(.PER_IP_CONNECTION_LIMIT, configuration.maximumConnectionsPerAddress))
        }
        if configuration.threads > 1 { options.append(item(.THREAD_POOL_SIZE, configuration.threads)) }
        if let tls = configuration.tls {
            guard MHD_is_feature_supported(.FEATURE_TLS) == .YES else {
                throw HTTPServerError("this libmicrohttpd was built without TLS support")
            }
            flags |= UInt32(MHD_USE_TLS.rawValue)
            retained = [strdup(tls.keyPEM), strdup(tls.certificatePEM), strdup("NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2")]
            options.append(item(.HTTPS_MEM_KEY, 0, UnsafeMutableRawPointer(retained[0])))
            options.append(item(.HTTPS_MEM_CERT, 0, UnsafeMutableRawPointer(retained[1])))
            options.append(item(.HTTPS_PRIORITIES, 0, UnsafeMutableRawPointer(retained[2])))
        }
        let started = withUnsafeMutablePointer(to: &address) { addressPointer in
            options.append(item(.SOCK_ADDR, 0, UnsafeMutableRawPointer(addressPointer)))
            options.append(item(.END))
            return ledger_mhd_start_daemon(flags, configuration.port, acceptPolicy, context, accessHandler, context, options)
        }
        guard let started else {
            retained.forEach { free($0) }
            let detail = core.takeDaemonMessages().last.map { ": \($0)" } ?? ""
            throw HTTPServerError("cannot listen on \(configuration.host) port \(configuration.port)\(detail)")
        }
        handle = started
        port = ledger_mhd_bound_port(started)
        let interval = min(0.5, max(0.05, configuration.headerTimeoutSeconds / 4))
        let (stop, ended) = (watchdogStop, watchdogEnded)
        Thread { [core] in
            while stop.wait(timeout: .now() + interval) == .timedOut { core.enforceHeaderDeadline() }
            ended.signal()
        }.start()
    }

    deinit { stop() }

    func quiesce() {
        lock.lock()
        defer { lock.unlock() }
        core.startDraining()
        guard let handle, listeningSocket == nil else { return }
        let socket = MHD_quiesce_daemon(handle)
        // Refuse new connections at once (rather than leave them in the kernel's backlog), without
        // closing the descriptor libmicrohttpd's threads may still hold.
        if socket >= 0 { _ = shutdown(socket, Int32(SHUT_RDWR)) }
        listeningSocket = socket
    }

    func stop() {
        lock.lock()
        defer { lock.unlock() }
        guard let handle else { return }
        core.startStopping()
        // libmicrohttpd refuses to stop with suspended connections: answer what is still pending,
        // and wait until those answers are sent. An answer is only queued when the handler's
        // callback returns; its bytes go out on a later turn of the daemon thread's loop, and a
        // stop that comes first closes the connection with the answer unsent.
        core.answerPending(HTTPResponse.error(503, code: "shutting-down", message: "the server is shutting down; retry"))
        let deadline = Date().addingTimeInterval(2)
        while core.answeringCount > 0 && Date() < deadline { usleep(1_000) }
        watchdogStop.signal()
        watchdogEnded.wait()
        MHD_stop_daemon(handle)
        self.handle = nil
        if let listeningSocket, listeningSocket >= 0 { close(listeningSocket) }
        retained.forEach { free($0) }
        retained = []
    }

    /// The socket address of `host` (a literal or a name) and `port`.
    static func resolve(_ host: String, port: UInt16) throws(HTTPServerError) -> sockaddr_storage {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var results: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, nil, &hints, &results)
        guard status == 0, let first = results, let found = first.pointee.ai_addr else {
            let reason = status == 0 ? "no address" : String(cString: gai_strerror(status))
            throw HTTPServerError("cannot resolve listen address \(host): \(reason)")
        }
        defer { freeaddrinfo(results) }
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { target in
            target.copyMemory(from: UnsafeRawBufferPointer(start: found, count: Int(first.pointee.ai_addrlen)))
        }
        withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port = port.bigEndian }
            if pointer.pointee.ss_family == sa_family_t(AF_INET6) {
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port = port.bigEndian }
            }
        }
        return storage
    }
}

/// State shared by libmicrohttpd's callbacks: the handler, the limits and the requests in flight.
final class ServerCore: @unchecked Sendable {
    let configuration: HTTPServer.Configuration
    let handler: HTTPServer.Handler
    let observer: (@Sendable (HTTPServer.Completion) -> Void)?
    private let lock = NSLock()
    private var live: [ObjectIdentifier: Exchange] = [:]
    /// Quiesced: a request whose headers arrive from now on is refused 503.
    private var draining = false
    /// Stopping: every request not yet handed to the handler is refused 503, however early it arrived.
    private var stopping = false
    private var daemonMessages: [String] = []
    /// The open connections, by libmicrohttpd's handle (under their own lock: touched as each
    /// connection opens and closes, and twice per request).
    private let connectionLock = NSLock()
    private var connections: [OpaquePointer: OpenConnection] = [:]

    /// A connection, and what it is waiting for: a request's headers (since when), or the first
    /// byte of its next request on a keep-alive connection (since when its last answer was sent).
    /// Neither while a request's body is arriving or its answer is pending.
    struct OpenConnection {
        let socket: Int32
        var awaitingHeadersSince: UInt64?
        var idleSince: UInt64?
        /// Shut down for missing its header deadline (once).
        var cut = false
    }

    init(
        configuration: HTTPServer.Configuration, handler: @escaping HTTPServer.Handler,
        observer: (@Sendable (HTTPServer.Completion) -> Void)?
    ) {
        self.configuration = configuration
        self.handler = handler
        self.observer = observer
    }

    var liveCount: Int { lock.withLock { live.count } }
    /// Requests handed to the handler and not yet finished: awaiting its answer, or sending it.
    var answeringCount: Int { lock.withLock { live.values.filter { !$0.isReceiving }.count } }
    var isDraining: Bool { lock.withLock { draining } }
    var isStopping: Bool { lock.withLock { stopping } }

    func startDraining() { lock.withLock { draining = true } }

    func startStopping() {
        lock.withLock {
            draining = true
            stopping = true
        }
    }

    /// Counts `exchange` in flight; whether it was admitted, i.e. its headers arrived before the
    /// server was quiesced (decided under the same lock, so a request counted in flight is never
    /// then refused for draining).
    func register(_ exchange: Exchange) -> Bool {
        lock.withLock {
            live[ObjectIdentifier(exchange)] = exchange
            return !draining
        }
    }

    func finish(_ exchange: Exchange) {
        lock.withLock { _ = live.removeValue(forKey: ObjectIdentifier(exchange)) }
        observer?(exchange.completion())
    }

    func answerPending(_ response: HTTPResponse) {
        for exchange in lock.withLock({ Array(live.values) }) where exchange.isPending { exchange.deliver(response) }
    }

    /// libmicrohttpd's messages, kept (bounded) to explain a failed start; never request data.
    func record(daemonMessage: String) {
        lock.withLock {
            daemonMessages.append(daemonMessage)
            if daemonMessages.count > 16 { daemonMessages.removeFirst() }
        }
    }

    func takeDaemonMessages() -> [String] {
        lock.withLock {
            defer { daemonMessages = [] }; return daemonMessages
        }
    }

    /// Whether a connection just accepted may stay: fewer than ``HTTPServer/Configuration/maximumConnections``
    /// are open. libmicrohttpd closes one refused here at once.
    var hasRoomForConnection: Bool {
        let room = connectionLock.withLock { connections.count < max(1, configuration.maximumConnections) }
        if !room { configuration.onConnectionRefused?(.connectionLimit) }
        return room
    }

    func connectionOpened(_ connection: OpaquePointer) {
        let socket = ledger_mhd_connection_socket(connection)
        connectionLock.withLock {
            connections[connection] = OpenConnection(socket: socket, awaitingHeadersSince: DispatchTime.now().uptimeNanoseconds)
        }
    }

    /// libmicrohttpd reports a connection closed before it closes the socket: once this returns,
    /// the watchdog no longer touches that descriptor (which may then be reused).
    func connectionClosed(_ connection: OpaquePointer) {
        connectionLock.withLock { _ = connections.removeValue(forKey: connection) }
    }

    private func headersArrived(on connection: OpaquePointer) {
        connectionLock.withLock {
            connections[connection]?.awaitingHeadersSince = nil
            connections[connection]?.idleSince = nil
        }
    }

    func requestFinished(on connection: OpaquePointer) {
        connectionLock.withLock {
            connections[connection]?.awaitingHeadersSince = nil
            connections[connection]?.idleSince = DispatchTime.now().uptimeNanoseconds
        }
    }

    /// Run by the watchdog a few times a second: shuts down (`shutdown(2)`, never `close(2)`:
    /// libmicrohttpd then closes the connection itself, with its own state) every connection whose
    /// request headers have not arrived within ``HTTPServer/Configuration/headerTimeoutSeconds``.
    /// The deadline of a keep-alive connection's next request starts at the first byte received
    /// after its previous answer (the kernel's `TCP_INFO` tells when data last arrived); until
    /// then it is idle, and the idle timeout applies.
    func enforceHeaderDeadline() {
        let now = DispatchTime.now().uptimeNanoseconds
        let limit = UInt64(max(0.001, configuration.headerTimeoutSeconds) * 1e9)
        connectionLock.withLock {
            for (key, open) in connections where !open.cut {
                var updated = open
                if let idle = open.idleSince {
                    let quiet = ledger_tcp_milliseconds_since_data(open.socket)
                    let idleMilliseconds = Int64((now &- idle) / 1_000_000)
                    // Data arrived since the answer (with a margin for the kernel's clock ticks).
                    guard quiet >= 0, quiet + 100 < idleMilliseconds else { continue }
                    updated.idleSince = nil
                    updated.awaitingHeadersSince = now &- UInt64(quiet) * 1_000_000
                }
                if let since = updated.awaitingHeadersSince, now &- since > limit {
                    // Reported before the shutdown: a client that sees its connection closed finds it counted.
                    configuration.onConnectionRefused?(.headerDeadline)
                    _ = shutdown(open.socket, Int32(SHUT_RDWR))
                    updated.cut = true
                }
                connections[key] = updated
            }
        }
    }

    /// libmicrohttpd's access handler: called once with the headers, once per body chunk, then
    /// once the request is complete (and again after a suspended connection is resumed).
    func access(
        _ connection: OpaquePointer, url: String, method: String, uploadSize: UnsafeMutablePointer<Int>, upload: UnsafePointer<CChar>?,
        context: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    ) -> MHD_Result {
        guard let existing = context.pointee else {
            headersArrived(on: connection)
            let exchange = Exchange(connection: connection, core: self, method: method, path: url)
            context.pointee = Unmanaged.passRetained(exchange).toOpaque()
            exchange.admitted = register(exchange)
            if let refusal = exchange.framingRefusal { return exchange.send(refusal) }
            if let length = exchange.request.header("content-length").flatMap(Int.init), length > exchange.bodyLimit {
                return exchange.send(exchange.tooLarge)
            }
            return .YES
        }
        let exchange = Unmanaged<Exchange>.fromOpaque(existing).takeUnretainedValue()
        if uploadSize.pointee > 0 {
            let count = uploadSize.pointee
            uploadSize.pointee = 0
            return exchange.receive(UnsafeRawBufferPointer(start: upload, count: count)) ? .YES : .NO
        }
        return exchange.requestComplete()
    }

}

/// One request on one connection, from its headers to the end of its response. Its request
/// fields are touched only on the connection's thread; `phase` and `response` under `lock`.
final class Exchange: @unchecked Sendable {
    enum Phase { case receiving, handling, suspended, sent }

    private let connection: OpaquePointer
    private unowned let core: ServerCore
    private(set) var request: HTTPRequest
    /// This request's body limit (``HTTPServer/Configuration/bodyLimit``).
    let bodyLimit: Int
    private let started = DispatchTime.now()
    private var bodyTooLarge = false
    /// Its headers arrived before the server was quiesced (``ServerCore/register(_:)``).
    var admitted = true
    private let lock = NSLock()
    private var phase = Phase.receiving
    private var response: HTTPResponse?
    private var sentStatus: Int?
    private var sentNote: String?

    /// How many `Content-Length` headers the request has.
    private let contentLengthCount: Int

    init(connection: OpaquePointer, core: ServerCore, method: String, path: String) {
        self.connection = connection
        self.core = core
        let headers = Self.values(connection, .HEADER_KIND)
        request = HTTPRequest(
            method: method, path: path, query: Self.values(connection, .GET_ARGUMENT_KIND).values, loweredHeaders: headers.values)
        contentLengthCount = headers.counts["content-length", default: 0]
        bodyLimit = core.configuration.bodyLimit?(request) ?? core.configuration.maximumBodyBytes
    }

    /// The refusal of a request whose body's length is ambiguous, decided from its headers: where
    /// a proxy in front might see the body end elsewhere, the bytes after it could run as a
    /// request of their own (request smuggling). More than one `Content-Length`, one that is not
    /// plain digits, or one beside `Transfer-Encoding`: 400; a `Transfer-Encoding` other than
    /// `chunked`: 501. The connection is closed after the answer, so nothing sent after these
    /// headers is read as a request.
    var framingRefusal: HTTPResponse? {
        let close = [(name: "Connection", value: "close")]
        let length = request.header("content-length")
        let encoding = request.header("transfer-encoding")
        if contentLengthCount > 1 {
            return HTTPResponse.error(400, code: "bad-request", message: "the request has more than one Content-Length header", headers: close)
        }
        if let length, length.isEmpty || !length.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            return HTTPResponse.error(400, code: "bad-request", message: "Content-Length is not a decimal number", headers: close)
        }
        guard let encoding else { return nil }
        if encoding.lowercased() != "chunked" {
            return HTTPResponse.error(
                501, code: "unsupported-transfer-encoding", message: "Transfer-Encoding must be chunked (and given once)", headers: close)
        }
        if length != nil {
            return HTTPResponse.error(
                400, code: "bad-request", message: "the request has both Content-Length and Transfer-Encoding", headers: close)
        }
        return nil
    }

    var tooLarge: HTTPResponse {
        HTTPResponse.error(
            413, code: "payload-too-large", message: "the request body is longer than \(bodyLimit) bytes", headers: [("Connection", "close")])
    }

    private var elapsed: Double { Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9 }

    /// Awaiting a handler's answer.
    var isPending: Bool { lock.withLock { phase == .handling || phase == .suspended } }

    /// Its request (headers and body) is still arriving.
    var isReceiving: Bool { lock.withLock { phase == .receiving } }

    /// Takes one body chunk; false closes the connection (the body is arriving too slowly).
    func receive(_ chunk: UnsafeRawBufferPointer) -> Bool {
        guard elapsed <= core.configuration.bodyTimeoutSeconds else { return false }
        guard !bodyTooLarge else { return true }  // read and dropped, answered 413 at the end
        if request.body.count + chunk.count > bodyLimit {
            bodyTooLarge = true
            request.body = []
        } else {
            request.body.append(contentsOf: chunk)
        }
        return true
    }

    /// The request is complete: hand it to the handler, or send the answer it has given since.
    func requestComplete() -> MHD_Result {
        lock.lock()
        switch phase {
        case .receiving:
            phase = .handling
            lock.unlock()
            if bodyTooLarge { return send(tooLarge) }
            // Checked after `phase` became `.handling`: a stop that begins later finds this
            // exchange pending and answers it (``Daemon/stop()``).
            if !admitted || core.isStopping {
                return send(
                    HTTPResponse.error(
                        503, code: "shutting-down", message: "the server is shutting down; retry", headers: [("Retry-After", "1")]))
            }
            core.handler(request, HTTPResponder(self))
            lock.lock()
            guard let ready = response else {
                phase = .suspended
                MHD_suspend_connection(connection)
                lock.unlock()
                return .YES
            }
            lock.unlock()
            return send(ready)
        case .suspended:
            guard let ready = response else {
                MHD_suspend_connection(connection)
                lock.unlock()
                return .YES
            }
            lock.unlock()
            return send(ready)
        case .handling, .sent:
            lock.unlock()
            return .YES
        }
    }

    /// Records the handler's answer and resumes the connection if it waits for it.
    func deliver(_ answer: HTTPResponse) {
        lock.lock()
        guard response == nil, phase != .sent else {
            lock.unlock()
            return
        }
        response = answer
        let resume = phase == .suspended
        lock.unlock()
        if resume { MHD_resume_connection(connection) }
    }

    /// Queues `answer` on the connection (on its thread).
    func send(_ answer: HTTPResponse) -> MHD_Result {
        lock.withLock {
            phase = .sent
            sentStatus = answer.status
            sentNote = answer.note
        }
        var body = answer.body
        let created = body.withUnsafeMutableBytes { buffer in
            MHD_create_response_from_buffer(buffer.count, buffer.baseAddress, .RESPMEM_MUST_COPY)
        }
        guard let created else { return .NO }
        defer { MHD_destroy_response(created) }
        for (name, value) in answer.headers { _ = MHD_add_response_header(created, name, value) }
        if core.isDraining && answer.header("Connection") == nil { _ = MHD_add_response_header(created, "Connection", "close") }
        return MHD_queue_response(connection, UInt32(answer.status), created)
    }

    func completion() -> HTTPServer.Completion {
        lock.withLock {
            HTTPServer.Completion(method: request.method, path: request.path, status: sentStatus, seconds: elapsed, note: sentNote)
        }
    }

    private static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> ValueCollector {
        let collector = ValueCollector()
        _ = withExtendedLifetime(collector) {
            MHD_get_connection_values(connection, kind, collectValue, Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector
    }
}

/// Collects a connection's headers or query arguments; a repeated name's values joined with `, `,
/// and how many times each name came.
private final class ValueCollector {
    var values: [String: String] = [:]
    var counts: [String: Int] = [:]

    func add(_ name: String, _ value: String) {
        if let existing = values[name] { values[name] = existing + ", " + value } else { values[name] = value }
        counts[name, default: 0] += 1
    }
}

// libmicrohttpd's callbacks: plain C functions that find their Swift object through the context.

private let collectValue: MHD_KeyValueIterator = { context, kind, key, value in
    guard let context, let key else { return .YES }
    var name = String(cString: key)
    if kind == .HEADER_KIND { name = name.lowercased() }
    Unmanaged<ValueCollector>.fromOpaque(context).takeUnretainedValue().add(name, value.map { String(cString: $0) } ?? "")
    return .YES
}

private let accessHandler: MHD_AccessHandlerCallback = { context, connection, url, method, _, upload, uploadSize, requestContext in
    guard let context, let connection, let uploadSize, let requestContext else { return .NO }
    return Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue().access(
        connection, url: url.map { String(cString: $0) } ?? "/", method: method.map { String(cString: $0) } ?? "",
        uploadSize: uploadSize, upload: upload, context: requestContext)
}

private let requestCompleted: MHD_RequestCompletedCallback = { context, connection, requestContext, _ in
    guard let context else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue()
    if let connection { core.requestFinished(on: connection) }
    guard let requestContext, let pointer = requestContext.pointee else { return }
    requestContext.pointee = nil
    core.finish(Unmanaged<Exchange>.fromOpaque(pointer).takeRetainedValue())
}

private let connectionChanged: MHD_NotifyConnectionCallback = { context, connection, _, event in
    guard let context, let connection else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue()
    switch event {
    case .CONNECTION_NOTIFY_STARTED: core.connectionOpened(connection)
    case .CONNECTION_NOTIFY_CLOSED: core.connectionClosed(connection)
    default: break
    }
}

private let acceptPolicy: MHD_AcceptPolicyCallback = { context, _, _ in
    guard let context else { return .YES }
    return Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue().hasRoomForConnection ? .YES : .NO
}

private let daemonMessage: MHD_LogCallback = { context, format, arguments in
    guard let context, let format, let arguments else { return }
    var buffer = [CChar](repeating: 0, count: 512)
    _ = vsnprintf(&buffer, buffer.count, format, arguments)
    let message = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    Unmanaged<ServerCore>.fromOpaque(context).takeUnretainedValue().record(
        daemonMessage: message.trimmingCharacters(in: .whitespacesAndNewlines))
}
