import Foundation

/// A complete HTTP request, as the server hands it to a handler: the body has been read in full
/// (within the configured limit).
public struct HTTPRequest: Sendable {
    /// `GET`, `POST`, … as the client sent it.
    public var method: String
    /// The decoded path, without the query string.
    public var path: String
    /// Query arguments, decoded; a repeated name keeps its last value.
    public var query: [String: String]
    /// Headers by lower-cased name; the values of a repeated header are joined with `, `.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:], body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.query = query
        var lowered: [String: String] = [:]
        for (name, value) in headers {
            let key = name.lowercased()
            lowered[key] = lowered[key].map { $0 + ", " + value } ?? value
        }
        self.headers = lowered
        self.body = body
    }

    /// A request whose header names are already lower-cased and joined (as the server collects them).
    init(method: String, path: String, query: [String: String], loweredHeaders: [String: String]) {
        self.method = method
        self.path = path
        self.query = query
        headers = loweredHeaders
        body = []
    }

    /// The header `name` (case-insensitive).
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// An HTTP response.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// A short note for the server's own request log (``HTTPServer/Completion/note``); never sent.
    public var note: String?

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = [], note: String? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.note = note
    }

    /// A JSON response: `body` is sent as is, with `Content-Type: application/json`.
    public static func json(_ status: Int, _ body: String, headers: [(name: String, value: String)] = [], note: String? = nil)
        -> HTTPResponse
    {
        HTTPResponse(
            status: status, headers: [("Content-Type", "application/json")] + headers, body: Array((body + "\n").utf8), note: note)
    }

    /// The server's own refusals: `{"code": code, "message": message}`.
    public static func error(_ status: Int, code: String, message: String, headers: [(name: String, value: String)] = [])
        -> HTTPResponse
    {
        let object = ["code": code, "message": message]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return json(status, String(decoding: data, as: UTF8.self), headers: headers, note: code)
    }

    /// The value of header `name` (case-insensitive), if set.
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// Answers one request. A handler receives one per request and must call ``respond(_:)`` exactly
/// once, from any thread, now or later (e.g. once a commit is durable); later calls are ignored.
public final class HTTPResponder: Sendable {
    private let exchange: Exchange

    init(_ exchange: Exchange) { self.exchange = exchange }

    /// Sends `response` (the first call wins).
    public func respond(_ response: HTTPResponse) { exchange.deliver(response) }
}
