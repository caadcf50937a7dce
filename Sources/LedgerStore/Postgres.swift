import CPostgres
import Foundation

/// A libpq call that failed: the server's or libpq's message, the SQLSTATE when the server sent one,
/// and whether the connection is gone (the caller reconnects; the transaction did not commit unless
/// the failure came while waiting for the answer to `COMMIT`).
struct PostgresError: Error, CustomStringConvertible, Sendable {
    var message: String
    var sqlState: String?
    var connectionLost: Bool

    var description: String { sqlState.map { "\(message) (SQLSTATE \($0))" } ?? message }

    /// SQLSTATE classes that mean the session is over: connection exceptions (08), and the
    /// server shutting down or starting (57P01–57P03).
    static func isConnectionState(_ state: String?) -> Bool {
        guard let state else { return false }
        return state.hasPrefix("08") || ["57P01", "57P02", "57P03"].contains(state)
    }
}

/// A value sent to the server as a binary parameter.
enum PostgresValue {
    case int16(Int16)
    case int64(Int64)
    case bytes([UInt8])
    case text(String)
    case int16Array([Int16])
    case int64Array([Int64])
    case bytesArray([[UInt8]])
    case textArray([String])

    /// The parameter's type (`pg_type` oids).
    var oid: Oid {
        switch self {
        case .int16: 21
        case .int64: 20
        case .bytes: 17
        case .text: 25
        case .int16Array: 1005
        case .int64Array: 1016
        case .bytesArray: 1001
        case .textArray: 1009
        }
    }

    /// Appends the binary wire form to `out` (network byte order; arrays as `array_send` writes them).
    func encode(into out: inout [UInt8]) {
        switch self {
        case .int16(let value): Self.append(UInt16(bitPattern: value), to: &out)
        case .int64(let value): Self.append(UInt64(bitPattern: value), to: &out)
        case .bytes(let bytes): out += bytes
        case .text(let text): out += text.utf8
        case .int16Array(let values):
            Self.appendArray(of: 21, count: values.count, to: &out) { index, out in
                Self.append(Int32(2), to: &out)
                Self.append(UInt16(bitPattern: values[index]), to: &out)
            }
        case .int64Array(let values):
            Self.appendArray(of: 20, count: values.count, to: &out) { index, out in
                Self.append(Int32(8), to: &out)
                Self.append(UInt64(bitPattern: values[index]), to: &out)
            }
        case .bytesArray(let values):
            Self.appendArray(of: 17, count: values.count, to: &out) { index, out in
                Self.append(Int32(values[index].count), to: &out)
                out += values[index]
            }
        case .textArray(let values):
            Self.appendArray(of: 25, count: values.count, to: &out) { index, out in
                Self.append(Int32(values[index].utf8.count), to: &out)
                out += values[index].utf8
            }
        }
    }

    /// The number of bytes ``encode(into:)`` appends.
    var encodedCount: Int {
        switch self {
        case .int16: 2
        case .int64: 8
        case .bytes(let bytes): bytes.count
        case .text(let text): text.utf8.count
        case .int16Array(let values): 20 + values.count * 6
        case .int64Array(let values): 20 + values.count * 12
        case .bytesArray(let values): values.reduce(20) { $0 + 4 + $1.count }
        case .textArray(let values): values.reduce(20) { $0 + 4 + $1.utf8.count }
        }
    }

    static func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }

    static func append<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
    }

    /// A one-dimensional array without NULLs: dimensions, flags, element type, length and lower
    /// bound, then each element's length and bytes (`appendElement(index, &out)` appends both).
    static func appendArray(of element: Oid, count: Int, to out: inout [UInt8], _ appendElement: (Int, inout [UInt8]) -> Void) {
        append(Int32(count == 0 ? 0 : 1), to: &out)
        append(Int32(0), to: &out)
        append(UInt32(element), to: &out)
        guard count > 0 else { return }
        append(Int32(count), to: &out)
        append(Int32(1), to: &out)
        for index in 0..<count { appendElement(index, &out) }
    }
}

/// One statement: SQL with `$n` placeholders and its parameters.
struct PostgresStatement {
    var sql: String
    var parameters: [PostgresValue]

    init(_ sql: String, _ parameters: [PostgresValue] = []) {
        self.sql = sql
        self.parameters = parameters
    }
}

/// A statement's rows, every column in binary form.
final class PostgresRows {
    private let result: OpaquePointer?

    init(_ result: OpaquePointer?) { self.result = result }
    deinit { PQclear(result) }

    var count: Int { Int(PQntuples(result)) }
    var columns: Int { Int(PQnfields(result)) }

    /// The bytes of a column (nil for NULL), valid while the rows live.
    func value(_ row: Int, _ column: Int) -> UnsafeRawBufferPointer? {
        guard row < count, column < columns, PQgetisnull(result, Int32(row), Int32(column)) == 0 else { return nil }
        return UnsafeRawBufferPointer(
            start: PQgetvalue(result, Int32(row), Int32(column)), count: Int(PQgetlength(result, Int32(row), Int32(column))))
    }

    /// A column's bytes, copied (nil for NULL).
    func bytes(_ row: Int, _ column: Int) -> [UInt8]? { value(row, column).map(Array.init) }

    /// Every column of a row, copied.
    func row(_ row: Int) -> [[UInt8]?] { (0..<columns).map { value(row, $0).map(Array.init) } }
}

/// One libpq connection, used by one thread at a time. Every statement is sent with binary
/// parameters and answered in binary (extended protocol), so no value is ever spliced into SQL.
final class PostgresConnection {
    private let handle: OpaquePointer
    /// The connection string's password, scrubbed from any message libpq builds.
    private let secret: String?

    /// Connects with `url` (a `postgres://` URL, given to libpq as it is). Throws a
    /// ``PostgresError`` with `connectionLost` set when the server cannot be reached.
    init(url: PostgresURL) throws {
        // The URL is expanded as libpq's `dbname`; sessions show up as `ledger` in pg_stat_activity
        // unless the URL names its own application_name. The TCP settings come before it, so the
        // URL's own values win.
        let defaults = Self.tcpDefaults.filter { Self.libpqKeywords.contains($0.keyword) }
        let keywords = defaults.map(\.keyword) + ["dbname", "fallback_application_name"]
        let values = defaults.map(\.value) + [url.connectionString, "ledger"]
        let connection = keywords.withCStrings { k in values.withCStrings { v in PQconnectdbParams(k, v, 1) } }
        guard let connection else {
            throw PostgresError(message: "libpq could not allocate a connection", sqlState: nil, connectionLost: true)
        }
        handle = connection
        secret = url.password
        guard PQstatus(connection) == CONNECTION_OK else {
            // deinit closes the connection (the object is initialised).
            let message = Self.scrub(String(cString: PQerrorMessage(connection)), secret: url.password)
            throw PostgresError(message: message, sqlState: nil, connectionLost: true)
        }
        // Errors come back as exceptions; notices (e.g. "relation already exists, skipping") are dropped.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        // Prepared statements are parsed once but planned on every execution with their parameters: a
        // plan cached while a table was small (a sequential scan) would otherwise outlive its growth.
        // No JIT compilation: the ledger's statements are short index lookups and batch inserts, whose
        // estimated cost passes `jit_above_cost` on a large store: compiling them took more server CPU
        // than running them (docs/benchmarks.md, "End of session 25", PostgreSQL).
        try query("SELECT set_config('plan_cache_mode', 'force_custom_plan', false), set_config('jit', 'off', false)")
    }

    deinit { PQfinish(handle) }

    /// TCP keepalives and a user timeout on every connection (libpq's defaults leave a dead peer
    /// unnoticed for about two hours: a writer waiting for an answer from a server that vanished, or
    /// partitioned from it, would never reach its reconnect window): probes after 30 s idle, every
    /// 10 s, the connection dropped after 3 unanswered, or when sent data stays unacknowledged for
    /// 60 s (`tcp_user_timeout`, libpq 12 or newer). A URL setting any of them keeps its own value;
    /// Unix sockets ignore them.
    static let tcpDefaults: [(keyword: String, value: String)] = [
        ("keepalives", "1"), ("keepalives_idle", "30"), ("keepalives_interval", "10"), ("keepalives_count", "3"),
        ("tcp_user_timeout", "60000"),
    ]

    /// The connection keywords this libpq knows (an unknown one would fail every connection).
    static let libpqKeywords: Set<String> = {
        guard let options = PQconndefaults() else { return [] }
        defer { PQconninfoFree(options) }
        var keywords = Set<String>()
        var option = options
        while let keyword = option.pointee.keyword {
            keywords.insert(String(cString: keyword))
            option += 1
        }
        return keywords
    }()

    /// The value libpq uses for connection keyword `keyword` on this connection (nil: unset).
    func option(_ keyword: String) -> String? {
        guard let options = PQconninfo(handle) else { return nil }
        defer { PQconninfoFree(options) }
        var option = options
        while let name = option.pointee.keyword {
            if String(cString: name) == keyword { return option.pointee.val.map { String(cString: $0) } }
            option += 1
        }
        return nil
    }

    /// Shuts the connection's socket down under libpq, as a network failure would (tests): the server
    /// still runs what it has received, and this side's next read finds the connection lost.
    func dropSocket() {
        _ = shutdown(PQsocket(handle), Int32(SHUT_RDWR))
    }

    /// Whether the session still looks usable (libpq has not seen it break).
    var isHealthy: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Whether a transaction block is open (or aborted) on the server.
    var inTransaction: Bool {
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// Runs one statement and returns its rows.
    @discardableResult
    func query(_ sql: String, _ parameters: [PostgresValue] = []) throws -> PostgresRows {
        try query(PostgresStatement(sql, parameters))
    }

    @discardableResult
    func query(_ statement: PostgresStatement) throws -> PostgresRows {
        guard let name = try prepared(statement) else { return try check(PQexecParams(handle, statement.sql, 0, nil, nil, nil, nil, 1)) }
        let result = withParameters(statement.parameters) { _, values, lengths, formats in
            PQexecPrepared(handle, name, Int32(statement.parameters.count), values, lengths, formats, 1)
        }
        return try check(result)
    }

    /// Statements with parameters, prepared on this session (by text and parameter types) under their names.
    private var preparedNames: [PreparedKey: String] = [:]

    private struct PreparedKey: Hashable {
        var sql: String
        var types: [Oid]
    }

    /// The name `statement` is prepared under on this session, preparing it the first time (one round
    /// trip per statement per session: the server parses and plans it once, not on every group); nil
    /// for a statement without parameters (BEGIN, COMMIT, the schema), which is sent as it is.
    private func prepared(_ statement: PostgresStatement) throws -> String? {
        guard !statement.parameters.isEmpty else { return nil }
        let key = PreparedKey(sql: statement.sql, types: statement.parameters.map(\.oid))
        if let name = preparedNames[key] { return name }
        let name = "ledger_\(preparedNames.count + 1)"
        _ = try check(PQprepare(handle, name, statement.sql, Int32(key.types.count), key.types))
        preparedNames[key] = name
        return name
    }

    /// Sends every statement at once (libpq's pipeline mode: one round trip) and returns each one's
    /// rows. When one fails, the ones after it are not run, and its error is thrown. `afterSending`
    /// runs once everything is sent, before the answers are read (tests).
    @discardableResult
    func pipeline(_ statements: [PostgresStatement], afterSending: ((PostgresConnection) -> Void)? = nil) throws -> [PostgresRows] {
        let names = try statements.map(prepared)
        guard PQenterPipelineMode(handle) == 1 else { throw failure(nil) }
        var sent = 0
        var sendError: PostgresError?
        for (statement, name) in zip(statements, names) {
            let ok = withParameters(statement.parameters) { types, values, lengths, formats in
                if let name { return PQsendQueryPrepared(handle, name, Int32(statement.parameters.count), values, lengths, formats, 1) }
                return PQsendQueryParams(handle, statement.sql, 0, nil, nil, nil, nil, 1)
            }
            guard ok == 1 else {
                sendError = failure(nil)
                break
            }
            sent += 1
        }
        if PQpipelineSync(handle) != 1, sendError == nil { sendError = failure(nil) }
        if sendError == nil { afterSending?(self) }
        // Read what was sent, through the sync, so the connection is usable again.
        var rows: [PostgresRows] = []
        var firstError: PostgresError?
        for _ in 0..<sent {
            guard let result = PQgetResult(handle) else {
                firstError = firstError ?? failure(nil)
                break
            }
            do {
                rows.append(try check(result))
            } catch let error as PostgresError {
                firstError = firstError ?? error
            }
            while let extra = PQgetResult(handle) { PQclear(extra) }  // the NULL that ends each statement's results
        }
        while let result = PQgetResult(handle) {
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { break }
        }
        if PQexitPipelineMode(handle) != 1, firstError == nil, sendError == nil { firstError = failure(nil) }
        if let error = sendError ?? firstError { throw error }
        return rows
    }

    private func withParameters<R>(
        _ parameters: [PostgresValue],
        _ body: (UnsafePointer<Oid>?, UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R
    ) -> R {
        let types = parameters.map(\.oid)
        let formats = [Int32](repeating: 1, count: parameters.count)
        // One buffer holds every parameter's bytes, each encoded in place (and one spare byte, so an
        // empty value still has a pointer: a null pointer would send SQL NULL); the pointers into it
        // live for the call.
        var buffer = [UInt8]()
        buffer.reserveCapacity(parameters.reduce(1) { $0 + $1.encodedCount })
        var offsets: [Int] = []
        var lengths: [Int32] = []
        for parameter in parameters {
            offsets.append(buffer.count)
            parameter.encode(into: &buffer)
            lengths.append(Int32(buffer.count - offsets[offsets.count - 1]))
        }
        buffer.append(0)
        return buffer.withUnsafeBytes { storage in
            let pointers: [UnsafePointer<CChar>?] = offsets.map { offset in
                storage.baseAddress.map { ($0 + offset).assumingMemoryBound(to: CChar.self) }
            }
            return pointers.withUnsafeBufferPointer { values in body(types, values.baseAddress, lengths, formats) }
        }
    }

    /// The rows of a result, or the error it reports.
    private func check(_ result: OpaquePointer?) throws -> PostgresRows {
        guard let result else { throw failure(nil) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_SINGLE_TUPLE:
            return PostgresRows(result)
        default:
            defer { PQclear(result) }
            throw failure(result)
        }
    }

    private func failure(_ result: OpaquePointer?) -> PostgresError {
        var message = String(cString: PQerrorMessage(handle))
        var state: String?
        if let result {
            let text = String(cString: PQresultErrorMessage(result))
            if !text.isEmpty { message = text }
            if let field = PQresultErrorField(result, Int32(UInt8(ascii: "C"))) { state = String(cString: field) }
            if PQresultStatus(result) == PGRES_PIPELINE_ABORTED { message = "an earlier statement of the pipeline failed" }
        }
        message = Self.scrub(message.trimmingCharacters(in: .whitespacesAndNewlines), secret: secret)
        return PostgresError(
            message: message.isEmpty ? "the connection failed" : message, sqlState: state,
            connectionLost: PQstatus(handle) != CONNECTION_OK || PostgresError.isConnectionState(state))
    }

    /// `message` with every occurrence of the password replaced, should libpq ever echo it.
    static func scrub(_ message: String, secret: String?) -> String {
        guard let secret, !secret.isEmpty else { return message }
        return message.replacingOccurrences(of: secret, with: "***")
    }
}

extension Array where Element == String {
    /// The strings as a NULL-terminated array of C strings, valid during `body`.
    func withCStrings<R>(_ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
        let copies = map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers = copies.map { UnsafePointer($0) } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress) }
    }
}
