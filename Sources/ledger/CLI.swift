import AppleSignedData
import Foundation
import Glibc
import LedgerStore
import OwnershipLedger

/// Exit codes (documented in README.md).
enum ExitCode: Int32 {
    case success = 0
    /// Verification found a problem (broken chain, violated invariant, rejected JWS, differing read models).
    case verificationFailed = 1
    /// The command line was wrong.
    case usage = 2
    /// The store could not be opened or written (missing, key file, newer format, corrupt).
    case storeError = 3
    /// The App Store Server API could not be used (401, 404, still 429 or 5xx after the retries).
    case appleAPIFailed = 4
}

/// A failure that ends the command with an exit code and a message.
struct CLIError: Error {
    var code: ExitCode
    var message: String
    static func usage(_ message: String) -> CLIError { CLIError(code: .usage, message: message) }
}

/// Where a command writes: standard output and standard error.
struct Console {
    /// Makes sure descriptors 0–2 are open before anything else is: a closed one would be reused by
    /// the next file opened (the store's lock file, a new key file), which would then receive the
    /// answers or messages. Standard input and standard error are opened on /dev/null when closed
    /// (no input; nowhere to report); a closed standard output is exit 3, as when it cannot be written.
    static func requireStandardDescriptors() {
        for descriptor in [STDIN_FILENO, STDERR_FILENO, STDOUT_FILENO] where fcntl(descriptor, F_GETFD) == -1 {
            guard descriptor != STDOUT_FILENO else {
                write(Array("error: standard output is closed: the answers would have nowhere to go\n".utf8), to: STDERR_FILENO)
                _exit(ExitCode.storeError.rawValue)
            }
            let null = open("/dev/null", descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY)
            if null >= 0 && null != descriptor {
                dup2(null, descriptor)
                close(null)
            }
        }
    }

    func out(_ line: String) { Self.write(Array((line + "\n").utf8), to: STDOUT_FILENO) }
    func err(_ line: String) { Self.write(Array((line + "\n").utf8), to: STDERR_FILENO) }
    /// Raw bytes to standard output.
    func write(_ bytes: [UInt8]) { Self.write(bytes, to: STDOUT_FILENO) }
    /// Text to standard error as it is (progress lines that rewrite themselves with `\r`).
    func progress(_ text: String) { Self.write(Array(text.utf8), to: STDERR_FILENO) }

    /// Writes every byte to `descriptor`. When standard output's reader has gone away (EPIPE), the
    /// process ends by SIGPIPE, as it would had its parent not ignored that signal (an ignored SIGPIPE
    /// is inherited); any other failure to write standard output (a full disk, an I/O error) is exit 3
    /// naming it. What was decided before stays durable either way: sending the lines again answers
    /// them. A failure to write standard error is ignored: there is nowhere left to report it.
    static func write(_ bytes: [UInt8], to descriptor: Int32) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress.map { $0 + offset }, $0.count - offset) }
            if written >= 0 {
                offset += written
                continue
            }
            let code = errno
            if code == EINTR { continue }
            guard descriptor == STDOUT_FILENO else { return }
            if code == EPIPE {
                signal(SIGPIPE, SIG_DFL)
                raise(SIGPIPE)
            }
            write(Array("error: writing standard output failed: \(String(cString: strerror(code)))\n".utf8), to: STDERR_FILENO)
            // `_exit`, not `exit`: the reader and writer threads of `submit` may still be running, and
            // exit's teardown under them could crash (and then report a damaged store).
            _exit(ExitCode.storeError.rawValue)
        }
    }
}

/// Parsed `--name value` options, `--flag`s and positional arguments, checked against what a
/// command accepts.
struct Arguments {
    private(set) var options: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []

    /// Parses `raw`. Every option takes one non-empty value and may be given once, unless it is in
    /// `repeatable`; flags take no value; at most `positionals` plain words are accepted. A value
    /// that names one of the command's options or flags (`--uid --store`) is refused as missing;
    /// `--uid=--store` gives it.
    init(
        _ raw: [String], options allowed: Set<String>, flags allowedFlags: Set<String>, repeatable: Set<String> = [],
        positionals allowedPositionals: ClosedRange<Int> = 0...0
    ) throws {
        var index = 0
        while index < raw.count {
            let argument = raw[index]
            index += 1
            guard argument.hasPrefix("--"), argument.count > 2 else {
                positionals.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if allowedFlags.contains(name) {
                guard inlineValue == nil else { throw CLIError.usage("--\(name) is a flag and takes no value") }
                flags.insert(name)
            } else if allowed.contains(name) {
                let value: String
                if let inlineValue {
                    value = inlineValue
                } else {
                    // A missing value followed by another option must not take that option as its value.
                    guard index < raw.count, !Self.namesOption(raw[index], options: allowed, flags: allowedFlags) else {
                        throw CLIError.usage("--\(name) needs a value")
                    }
                    value = raw[index]
                    index += 1
                }
                guard !value.isEmpty else { throw CLIError.usage("--\(name) needs a non-empty value") }
                guard options[name] == nil || repeatable.contains(name) else {
                    throw CLIError.usage("--\(name) is given more than once")
                }
                options[name, default: []].append(value)
            } else {
                throw CLIError.usage("unknown option --\(name)")
            }
        }
        guard allowedPositionals.contains(positionals.count) else {
            let words = positionals.map { "'\($0)'" }.joined(separator: " ")
            throw CLIError.usage(
                allowedPositionals.upperBound == 0
                    ? "unexpected argument \(words) (this command takes only options)"
                    : "expected \(allowedPositionals.lowerBound == allowedPositionals.upperBound ? "\(allowedPositionals.lowerBound)" : "\(allowedPositionals.lowerBound) to \(allowedPositionals.upperBound)") argument(s), got \(positionals.count): \(words)"
            )
        }
    }

    /// True when `word` is `--NAME` or `--NAME=…` for one of the command's options or flags.
    private static func namesOption(_ word: String, options: Set<String>, flags: Set<String>) -> Bool {
        guard word.hasPrefix("--") else { return false }
        let name = String(word.dropFirst(2).prefix { $0 != "=" })
        return options.contains(name) || flags.contains(name)
    }

    func value(_ name: String) -> String? { options[name]?.last }
    func values(_ name: String) -> [String] { options[name] ?? [] }

    /// An App Store original transaction id (``AppleIdentifier``: checked before the store is
    /// opened, so a typo cannot silently look up a lineage nobody can have).
    func originalTransactionId(required: Bool = true) throws -> String? {
        guard let id = value("original-transaction-id") else {
            if required { throw CLIError.usage("--original-transaction-id is required") }
            return nil
        }
        if let problem = AppleIdentifier.originalTransactionId.problem(id, field: "--original-transaction-id") {
            throw CLIError.usage(problem)
        }
        return id
    }

    /// The `--environment` option, when given; its name is compared byte for byte.
    func environment() throws -> AppleEnvironment? {
        guard let name = value("environment") else { return nil }
        guard let environment = AppleEnvironment(exactly: name) else {
            throw CLIError.usage("--environment \(name) is not Production, Sandbox, Xcode or LocalTesting")
        }
        return environment
    }

    func required(_ name: String) throws -> String {
        guard let value = value(name), !value.isEmpty else { throw CLIError.usage("--\(name) is required") }
        return value
    }

    /// The `--store` directory (default `./ledger-data`), for the commands that work on a store
    /// directory only.
    var store: URL { URL(fileURLWithPath: value("store") ?? "ledger-data") }

    /// The store: `--store` (a directory or a PostgreSQL URL), else `LEDGER_STORE`, else
    /// `./ledger-data`; for PostgreSQL with `--keys` / `LEDGER_KEYS` and `--read-store` /
    /// `LEDGER_READ_STORE` (docs/scale-out.md).
    func location() throws -> StoreLocation {
        do {
            return try StoreLocation.resolve(store: value("store"), keys: value("keys"), readStore: value("read-store"))
        } catch {
            throw CLIError.usage(error.description)
        }
    }

    /// The store directory (and key directory) of a command that has no PostgreSQL form; a usage
    /// error naming `alternative` otherwise.
    func storeDirectory(_ command: String, alternative: String) throws -> (store: URL, keys: URL) {
        guard case .directory(let url, let keys) = try location() else {
            throw CLIError.usage("`ledger \(command)` works on a store directory only; for a PostgreSQL store, \(alternative)")
        }
        return (url, keys)
    }

    func time(_ name: String) throws -> Int64? {
        guard let text = value(name) else { return nil }
        guard let time = LedgerTime.parse(text) else {
            throw CLIError.usage(
                "--\(name) \(text) is not a time the ledger accepts: ISO-8601 (2026-11-29T12:00:00Z) or milliseconds since the epoch "
                    + "(digits only), from 1970-01-01T00:00:00Z through 9999-12-31T23:59:59.999Z")
        }
        return time
    }

    func integer(_ name: String) throws -> Int? {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), number >= 0 else { throw CLIError.usage("--\(name) \(text) is not a non-negative integer") }
        return number
    }
}

/// One subcommand.
protocol Subcommand {
    static var name: String { get }
    /// One line for `ledger --help`.
    static var abstract: String { get }
    /// Full usage text for `ledger NAME --help`.
    static var usage: String { get }
    static var options: Set<String> { get }
    static var flags: Set<String> { get }
    static var repeatable: Set<String> { get }
    static var positionals: ClosedRange<Int> { get }
    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode
}

extension Subcommand {
    static var flags: Set<String> { [] }
    /// Options that may be given more than once.
    static var repeatable: Set<String> { [] }
    /// How many plain words (subcommand, file) the command takes.
    static var positionals: ClosedRange<Int> { 0...0 }
}

/// Opens the ledger the store options name.
func openLedger(_ arguments: Arguments) throws -> Ledger {
    try Ledger(opening: arguments.location())
}

/// Warns a writer when the log's last record was recorded more than a minute ahead of this machine's
/// clock (a clock that was ahead when it was written): new records keep that time until the clock
/// passes it (`recordedAt` never goes back), so cuts at the current time (`--at`, `--until`) miss them.
func warnIfClockBehindLog(_ ledger: Ledger, console: Console) throws {
    let last = try ledger.store.head().recordedAt
    let now = LedgerTime.now()
    guard last > now + 60_000 else { return }
    console.err(
        "warning: the log's last record was recorded at \(LedgerTime.format(last)), \((last - now) / 1000) s ahead of this machine's "
            + "clock (\(LedgerTime.format(now))): new records take that time until the clock passes it, and `--at`/`--until` at the "
            + "current time will not see them. Check the clock (NTP) of every host that writes to this ledger (docs/forensics.md).")
}

/// Warns (one line on standard error) that a new or restored store keeps its key files beside `data.mdb`:
/// a copy of the directory (a snapshot, rsync) then carries the keys that unseal its UIDs and sign its checkpoints.
func warnIfKeysBesideData(store: URL, keys: URL, console: Console) {
    guard store.standardizedFileURL.path == keys.standardizedFileURL.path else { return }
    console.err(
        "warning: the key files are in \(keys.path) beside data.mdb, so any copy of that directory carries them: keep them in a "
            + "separate directory with --keys DIR (or LEDGER_KEYS), docs/keys.md")
}

/// Opens the store the store options name.
func openStore(_ arguments: Arguments) throws -> LedgerStore {
    try LedgerStore(opening: arguments.location())
}
