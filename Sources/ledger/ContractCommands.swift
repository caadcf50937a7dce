import AppleSignedData
import Foundation
import LedgerCore
import OwnershipLedger
import StrictJSON

struct BindingCommand: Subcommand {
    static let name = "binding"
    static let abstract = "Who owns a subscription lineage (optionally as it was at a time)."
    static let usage = """
        Usage: ledger binding --original-transaction-id ID [--environment E] [--at TIME] [--store DIR]

        Prints {"state": "unbound"|"bound"|"tombstoned", "account": UID or null, "entitlement": ...}.
        --environment defaults to the ledger's; --at (ISO-8601 or ms) replays the log up to that time.
        """
    static let options: Set<String> = ["original-transaction-id", "environment", "at"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let id = try arguments.originalTransactionId() ?? ""
        let ledger = try openLedger(arguments)
        let environment = try arguments.environment()
        let view = try ledger.binding(originalTransactionId: id, environment: environment, at: try arguments.time("at"))
        var object = render(view)
        object["originalTransactionId"] = .string(id)
        object["environment"] = .string((environment ?? ledger.configuration.environment).rawValue)
        console.out(JSONWriter.string(.object(object)))
        return .success
    }
}

struct AccountCommand: Subcommand {
    static let name = "account"
    static let abstract = "An account's entitlements and whether each is active at a time."
    static let usage = """
        Usage: ledger account --uid UID [--at TIME] [--store DIR]

        Prints {"account": UID, "known": true|false, "entitlements": [{"productId", "expiresAt", "active", ...}]}.
        "active" is evaluated at --at (default now); a past --at replays the log up to that time.
        A deleted account is unknown: its identity mapping was erased.
        """
    static let options: Set<String> = ["uid", "at"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        let view = try ledger.account(uid: try arguments.required("uid"), at: try arguments.time("at"))
        console.out(JSONWriter.string(.object(render(view))))
        return .success
    }
}

struct InspectJWSCommand: Subcommand {
    static let name = "inspect-jws"
    static let abstract = "Check an Apple JWS exactly as `submit` would, and print its payload."
    static let usage = """
        Usage: ledger inspect-jws FILE|- [--as transaction|notification] [--at TIME] [--store DIR]

        Checks the compact JWS in FILE (or stdin with -) by the code `ledger submit` runs on a line carrying
        it as signedTransaction (--as transaction) or signedPayload (--as notification; the default when the
        payload has a notificationType): format, ES256, x5c chain to the configured root at the payload's
        signedDate, Apple OIDs, signature, bundle id, environment and app Apple id, every nested JWS of a
        notification, the payload's fields and types, and the checks on the submission (an auto-renewable
        subscription, ownership type, dates, identifiers). Prints {"valid": true, "checkedAs", "kind",
        "payload", "header", "leafSubject", "chainValidatedAt", "signatureVerified"}, or {"valid": false,
        "checkedAs", "code", "message"} with the very code and message `submit` gives. Exit 1 when refused.
        --at is the time of the attempt, as `at` in a submit line (default now): the chain is checked at the
        payload's signedDate, and at --at only when the payload has none.
        """
    static let positionals = 1...1
    static let options: Set<String> = ["at", "as"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        guard arguments.positionals.count == 1 else { throw CLIError.usage("give exactly one FILE, or - for stdin") }
        let path = arguments.positionals[0]
        let data: Data
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            data = try readFile(path, option: "FILE")
        }
        // A file's final line break is not part of the JWS; anything else around it is, as in `submit`.
        var text = String(decoding: data, as: UTF8.self)
        if text.hasSuffix("\n") { text.removeLast() }
        let jws = text
        let ledger = try openLedger(arguments)
        let now = try arguments.time("at") ?? LedgerTime.now()
        // Steps 1–5 only, to show what was checked; the verdict is `submit`'s own.
        let inspected = try? ledger.verifier.inspect(jws, now: now).get()
        let field: SubmitProtocol.SignedField
        switch arguments.value("as") {
        case nil: field = inspected?.kind == .notification ? .signedPayload : .signedTransaction
        case "transaction": field = .signedTransaction
        case "notification": field = .signedPayload
        case let other?: throw CLIError.usage("--as \(other) is not transaction or notification")
        }
        var object: JSONMembers = ["checkedAs": .string(field.rawValue)]
        if let refusal = SubmitProtocol(ledger: ledger, trustDecoded: false).check(signed: jws, in: field, at: now) {
            object["valid"] = false
            object["code"] = .string(refusal.code)
            object["message"] = .string(refusal.message)
            console.out(JSONWriter.string(.object(object)))
            return .verificationFailed
        }
        object["valid"] = true
        if let inspected {
            object["kind"] = .string(inspected.kind.rawValue)
            object["signatureVerified"] = .bool(inspected.signatureVerified)
            object["payload"] = .object(inspected.payload)
            object["header"] = .object(inspected.header)
            if let validatedAt = inspected.validatedAt { object["chainValidatedAt"] = .string(LedgerTime.format(validatedAt * 1000)) }
            if let subject = inspected.leafSubject { object["leafSubject"] = .string(subject) }
        }
        console.out(JSONWriter.string(.object(object)))
        return .success
    }
}
