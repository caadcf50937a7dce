public import Foundation

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// Blocking HTTP over the toolchain's `URLSession`: each ``send(_:)`` waits for the whole answer, and
/// any number of threads may send at once. It never follows a redirect (a bearer token must not travel
/// to another host) and reads at most ``maximumBodyBytes`` of an answer. The API client's transport;
/// the tests' HTTP client too.
public final class HTTPTransport: Sendable {
    public struct Response: Sendable {
        public var status: Int
        /// Header names lower-cased.
        public var headers: [String: String]
        public var body: Data
    }

    /// The longest answer accepted: a page of 20 signed items is a few hundred KiB.
    public static let maximumBodyBytes = 8 << 20

    private let session: URLSession

    /// A transport whose requests time out after `timeoutSeconds` without progress, with up to
    /// `connections` keep-alive connections per host.
    public init(timeoutSeconds: Double, connections: Int = 6) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = connections
        configuration.timeoutIntervalForRequest = timeoutSeconds
        configuration.timeoutIntervalForResource = timeoutSeconds * 2
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieAcceptPolicy = .never
        configuration.httpShouldSetCookies = false
        session = URLSession(configuration: configuration, delegate: RefuseRedirects(), delegateQueue: nil)
    }

    deinit { session.finishTasksAndInvalidate() }

    /// Sends `request` and waits for the whole answer; throws the transport's error (no connection,
    /// timeout, TLS failure) or ``TransportError`` for an answer that is not HTTP or too large.
    public func send(_ request: URLRequest) throws -> Response {
        let box = Outcome()
        let done = DispatchSemaphore(value: 0)
        session.dataTask(with: request) { data, response, error in
            box.set(data: data, response: response as? HTTPURLResponse, error: error)
            done.signal()
        }.resume()
        done.wait()
        return try box.result()
    }

    /// An answer that is not HTTP, or too large.
    public struct TransportError: Error, CustomStringConvertible {
        public var description: String
    }

    private final class Outcome: @unchecked Sendable {
        private let lock = NSLock()
        private var data: Data?
        private var response: HTTPURLResponse?
        private var error: (any Error)?

        func set(data: Data?, response: HTTPURLResponse?, error: (any Error)?) {
            lock.withLock {
                self.data = data
                self.response = response
                self.error = error
            }
        }

        func result() throws -> Response {
            try lock.withLock {
                if let error { throw error }
                guard let response else { throw TransportError(description: "the answer is not an HTTP response") }
                let body = data ?? Data()
                guard body.count <= HTTPTransport.maximumBodyBytes else {
                    throw TransportError(description: "the answer is larger than \(HTTPTransport.maximumBodyBytes) bytes")
                }
                var headers: [String: String] = [:]
                for (name, value) in response.allHeaderFields {
                    if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
                }
                return Response(status: response.statusCode, headers: headers, body: body)
            }
        }
    }

    /// Answers every redirect with "don't follow": the 3xx itself becomes the response.
    private final class RefuseRedirects: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            completionHandler(nil)
        }
    }
}
