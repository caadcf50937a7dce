import AppleSignedData
import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import OwnershipLedger

/// `ledger support …`: the support-recovery tool (docs/support-recovery.md).
struct SupportCommand: Subcommand {
    static let name = "support"
    static let abstract = "Support recovery: staff keys and roster, signed two-person transfers (dry run first)."
    static let usage = """
        Usage: ledger support SUBCOMMAND [OPTIONS] [--store DIR] [--keys DIR]

          keygen   --out FILE
                   Writes a new Ed25519 private key to FILE (PEM, mode 0600; keep it to yourself) and its
                   public key to FILE.pub; prints the public key.
          enroll   --staff ID --roles operator,approver[,administrator] --public-key FILE
                   --admin ID --admin-key FILE [--own-account UID]
                   A roster administrator enrols a staff member (signed with the administrator's key).
                   --own-account: the staff member's own MyRecipes UID, which can never be a transfer target.
          remove   --staff ID --admin ID --admin-key FILE
                   A roster administrator removes a staff member: they can no longer request, approve or apply.
          cosign   --change DIGEST [--admin ID --admin-key FILE]
                   With two or more administrators, enroll and remove only propose the change (step
                   "propose", printing its changeDigest); a second administrator co-signs it with this, and
                   only then does the roster change. Without --admin and --admin-key: shows the change and
                   its safeguards, appends nothing. With a single administrator, the only change allowed
                   is enrolling a second administrator (the bootstrap).
          request  --case ID --reason TEXT --original-transaction-id OTID [--environment E]
                   --target-account UID --target-auth TEXT --evidence TEXT --operator ID --key FILE
                   The operator opens a transfer: prints the plan and its digest, which the operator signs.
          approve  --case ID --plan-digest HEX --approver ID --key FILE
                   A different approver signs the plan digest they reviewed (`support transfer --case ID`
                   prints it); refused (and recorded as refused) when it is not the case's recorded plan's.
          transfer --case ID [--apply --staff ID --key FILE]
                   Dry run (default): prints the plan, requester, approver, every safeguard and what would
                   change; appends nothing. --apply checks everything again and, in one transaction, rebinds
                   the lineage, ends the previous account's live entitlement and appends the audit record.
                   It never grants: the customer must then run Restore Purchases on the target account.
                   The applier signs the apply; `ledger audit` and `ledger verify` check it.

        Every --key and --admin-key may be `-`: the private key (PEM) is read from standard input, so
        a key file only its owner can read can be used by a ledger running as the service user
        (`sudo -u ledger ledger support approve … --key - < ~/.ledger/adam.key`, docs/support-recovery.md).
        Case and staff ids are 1 to 128 printable ASCII characters without whitespace. --reason, --target-auth
        and --evidence are kept in clear in the immutable log: they must not contain customer identifiers,
        and a request whose case id or text holds the target UID, the current owner's UID or the original
        transaction id is refused (exit 2) before anything is recorded.
        A refused request, approval or apply appends only a transfer-refused record. Output is JSON.
        Exit 0 when the step was done (or a dry run finds every safeguard holds), 1 when refused, 2 usage.
        The first roster administrator is set by `ledger init --admin ID --admin-public-key FILE`.
        """
    static let subcommands: [String: Set<String>] = [
        "keygen": ["out"],
        "enroll": ["staff", "roles", "public-key", "admin", "admin-key", "own-account"],
        "remove": ["staff", "admin", "admin-key"],
        "cosign": ["change", "admin", "admin-key"],
        "request": [
            "case", "reason", "original-transaction-id", "environment", "target-account", "target-auth", "evidence", "operator", "key",
        ],
        "approve": ["case", "plan-digest", "approver", "key"],
        "transfer": ["case", "staff", "key"],
    ]
    static let positionals = 1...1
    static let options: Set<String> = subcommands.values.reduce(into: Set<String>()) { $0.formUnion($1) }
    static let flags: Set<String> = ["apply"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        guard arguments.positionals.count == 1, let sub = arguments.positionals.first, let allowed = subcommands[sub] else {
            throw CLIError.usage("give one subcommand: keygen, enroll, remove, cosign, request, approve or transfer")
        }
        for option in arguments.options.keys where !["store", "keys", "read-store"].contains(option) && !allowed.contains(option) {
            throw CLIError.usage("--\(option) is not an option of `support \(sub)`")
        }
        if arguments.flags.contains("apply") && sub != "transfer" { throw CLIError.usage("--apply belongs to `support transfer`") }
        do {
            return try dispatch(sub, arguments, console: console)
        } catch let error as SupportInputError {
            throw CLIError.usage("--\(option(for: error.field)): \(error)")
        }
    }

    /// The option that gives `field` (`--admin` also in `ledger init`).
    static func option(for field: SupportInputError.Field) -> String {
        switch field {
        case .caseId: "case"
        case .staff: "staff"
        case .administrator: "admin"
        case .operator_: "operator"
        case .approver: "approver"
        case .reason: "reason"
        case .targetAuthentication: "target-auth"
        case .ownershipEvidence: "evidence"
        }
    }

    /// Runs subcommand `sub` (already checked against its options).
    static func dispatch(_ sub: String, _ arguments: Arguments, console: Console) throws -> ExitCode {
        switch sub {
        case "keygen": return try keygen(arguments, console: console)
        case "enroll":
            let outcome = try refusing {
                try openLedger(arguments).enrollStaff(
                    try arguments.required("staff"), roles: try roles(arguments.required("roles")),
                    publicKey: try KeyFiles.publicKey(arguments.required("public-key"), option: "public-key"),
                    ownAccountUID: arguments.value("own-account"), administrator: try arguments.required("admin"),
                    administratorKey: try KeyFiles.privateKey(arguments.required("admin-key"), option: "admin-key"))
            }
            return report(outcome, console: console)
        case "remove":
            let outcome = try refusing {
                try openLedger(arguments).removeStaff(
                    try arguments.required("staff"), administrator: try arguments.required("admin"),
                    administratorKey: try KeyFiles.privateKey(arguments.required("admin-key"), option: "admin-key"))
            }
            return report(outcome, console: console)
        case "cosign":
            let digest = try digestOption(arguments, "change")
            guard (arguments.value("admin") == nil) == (arguments.value("admin-key") == nil) else {
                throw CLIError.usage("give --admin and --admin-key together (or neither, to review the change)")
            }
            let outcome = try refusing {
                guard let admin = arguments.value("admin"), let keyFile = arguments.value("admin-key") else {
                    return try openLedger(arguments).reviewRosterChange(digest: digest)
                }
                let key = try KeyFiles.privateKey(keyFile, option: "admin-key")
                return try openLedger(arguments).coSignRosterChange(digest: digest, administrator: admin, key: key)
            }
            return report(outcome, console: console)
        case "request":
            let input = TransferRequestInput(
                caseId: try arguments.required("case"), reason: try arguments.required("reason"),
                originalTransactionId: try arguments.originalTransactionId() ?? "",
                environment: try arguments.environment(), targetUID: try arguments.required("target-account"),
                targetAuthentication: try arguments.required("target-auth"), ownershipEvidence: try arguments.required("evidence"))
            let staff = try arguments.required("operator")
            let key = try KeyFiles.privateKey(arguments.required("key"), option: "key")
            return report(try openLedger(arguments).requestTransfer(input, operator: staff, key: key), console: console)
        case "approve":
            let caseId = try arguments.required("case")
            let digest = try digestOption(arguments, "plan-digest")
            let staff = try arguments.required("approver")
            let key = try KeyFiles.privateKey(arguments.required("key"), option: "key")
            return report(
                try openLedger(arguments).approveTransfer(caseId: caseId, approver: staff, key: key, planDigest: digest), console: console)
        default:
            let caseId = try arguments.required("case")
            guard arguments.flags.contains("apply") else {
                if arguments.value("staff") != nil || arguments.value("key") != nil {
                    throw CLIError.usage("--staff and --key are for --apply; without --apply this is a dry run")
                }
                return report(try openLedger(arguments).reviewTransfer(caseId: caseId), console: console)
            }
            let staff = try arguments.required("staff")
            let key = try KeyFiles.privateKey(arguments.required("key"), option: "key")
            return report(try openLedger(arguments).applyTransfer(caseId: caseId, staff: staff, key: key), console: console)
        }
    }

    /// A required SHA-256 digest option: 64 hexadecimal digits.
    static func digestOption(_ arguments: Arguments, _ name: String) throws -> Digest32 {
        let text = try arguments.required(name)
        guard text.utf8.count == 64, let bytes = [UInt8](hex: text), let digest = Digest32(bytes) else {
            throw CLIError.usage("--\(name) \(text) is not a SHA-256 digest (64 hexadecimal digits)")
        }
        return digest
    }

    static func keygen(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let path = try arguments.required("out")
        let key = try Ed25519PrivateKey.generate()
        try KeyFiles.writeNew(path, contents: key.pem, mode: 0o600)
        try KeyFiles.writeNew(path + ".pub", contents: key.publicKey.pem, mode: 0o644)
        console.out(
            JSONLine.render([
                "privateKeyFile": path, "publicKeyFile": path + ".pub", "publicKey": key.publicKey.pem,
                "publicKeyHex": key.publicKey.rawRepresentation.hex,
            ]))
        return .success
    }

    /// Runs a roster change, turning a ``SupportRefusal`` into its outcome.
    static func refusing(_ body: () throws -> SupportOutcome) throws -> SupportOutcome {
        do {
            return try body()
        } catch let refusal as SupportRefusal {
            return refusal.outcome
        }
    }

    static func roles(_ text: String) throws -> StaffRoles {
        var roles = StaffRoles()
        for name in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            switch name {
            case "operator": roles.insert(.operator_)
            case "approver": roles.insert(.approver)
            case "administrator": roles.insert(.administrator)
            default: throw CLIError.usage("--roles: \(name) is not operator, approver or administrator")
            }
        }
        return roles
    }

    /// Prints the outcome as one JSON line; exit 0 when accepted, 1 when refused.
    static func report(_ outcome: SupportOutcome, console: Console) -> ExitCode {
        console.out(JSONLine.render(SupportJSON.render(outcome)))
        if let reason = outcome.refusalReason { console.err("refused: \(reason)") }
        return outcome.accepted ? .success : .verificationFailed
    }
}

/// `ledger audit`: the trusted audit trail with signatures checked again.
struct AuditCommand: Subcommand {
    static let name = "audit"
    static let abstract = "The trusted audit trail: denials, deletions, roster changes and transfers, signatures re-verified."
    static let usage = """
        Usage: ledger audit [--case ID] [--original-transaction-id ID [--environment E]] [--store DIR]

        Replays the log and prints one JSON line per audit entry (denials, Family Sharing rejections,
        deletions, tombstones, staff enrolments and removals, transfer requests, approvals, applications and
        refusals) with its sequence number, time, staff id, case, private reason, and each signature checked
        again against the roster as it stood at that record ("signature": "valid" | "invalid", and for
        roster changes "coSignature"; docs/support-recovery.md lists every value). Staff-only: it shows
        private case reasons. Exit 1 when any signature does not verify, a required co-signature is missing
        or the log's hash chain is broken (named on standard error).
        """
    static let options: Set<String> = ["case", "original-transaction-id", "environment"]

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let ledger = try openLedger(arguments)
        let report = try ledger.audit(
            caseId: arguments.value("case"), originalTransactionId: try arguments.originalTransactionId(required: false),
            environment: try arguments.environment())
        for record in report.records { console.out(JSONLine.render(SupportJSON.render(record))) }
        if let fault = report.chainFault {
            console.err("ledger audit: the hash chain is broken (\(fault)): the entries above cannot be trusted; run ledger verify")
        }
        return report.isValid ? .success : .verificationFailed
    }
}

/// Key files: staff keys and the ledger signing public key.
enum KeyFiles {
    /// Reads an Ed25519 private key PEM that only its owner can read, or (`-`) from standard input:
    /// the caller's shell opens their own key file, so a ledger running as another user (the service
    /// user, through sudo) uses the key without being able to read the file.
    static func privateKey(_ path: String, option: String) throws -> Ed25519PrivateKey {
        let data: Data
        if path == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
            guard data.count <= 64 << 10 else { throw CLIError.usage("--\(option) -: standard input holds more than a key") }
        } else {
            data = try readFile(path, option: "--\(option)")
            var info = stat()
            guard stat(path, &info) == 0 else { throw CLIError.usage("--\(option): \(FileAccess.failure("look up", path, errno))") }
            let mode = UInt16(info.st_mode & 0o777)
            guard mode & 0o077 == 0 else {
                throw CLIError.usage("--\(option) \(path) has mode \(String(mode, radix: 8)) and can be read by others: run `chmod 600 \(path)`")
            }
        }
        do {
            return try Ed25519PrivateKey(pem: String(decoding: data, as: UTF8.self))
        } catch {
            throw CLIError.usage("--\(option) \(path) is not an Ed25519 private key (PEM): \(error)")
        }
    }

    /// Reads an Ed25519 public key PEM.
    static func publicKey(_ path: String, option: String) throws -> Ed25519PublicKey {
        let data = try readFile(path, option: "--\(option)")
        do {
            return try Ed25519PublicKey(pem: String(decoding: data, as: UTF8.self))
        } catch {
            throw CLIError.usage("--\(option) \(path) is not an Ed25519 public key (PEM): \(error)")
        }
    }

    /// Creates `path` (refusing to overwrite) with `mode` and writes `contents`.
    static func writeNew(_ path: String, contents: String, mode: mode_t) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode)
        guard fd >= 0 else { throw CLIError.usage("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let bytes = Array(contents.utf8)
        guard write(fd, bytes, bytes.count) == bytes.count, fsync(fd) == 0 else {
            throw CLIError(code: .storeError, message: "could not write \(path): \(String(cString: strerror(errno)))")
        }
    }
}

/// JSON renderings of support outcomes and audit records.
enum SupportJSON {
    static func render(_ outcome: SupportOutcome) -> JSONObject {
        var object: JSONObject = [
            "step": outcome.step, "accepted": outcome.accepted,
            "checks": outcome.checks.map { ["check": $0.name, "passed": $0.passed, "detail": $0.detail] },
            "appended": outcome.appended.map(\.name), "seq": outcome.sequences,
        ]
        if let caseId = outcome.caseId { object["caseId"] = caseId }
        if let reason = outcome.refusalReason { object["refused"] = reason }
        if let change = outcome.rosterChange {
            var rendered = RecordJSON.fields(of: change.event)
            rendered["event"] = change.event.name
            object["change"] = rendered
        }
        if let digest = outcome.changeDigest { object["changeDigest"] = digest.hex }
        if let plan = outcome.plan {
            var source: JSONObject =
                switch plan.source {
                case .bound(let account): ["state": "bound", "account": account.description]
                case .tombstoned(let account): ["state": "tombstoned", "formerAccount": account.description]
                }
            if let uid = outcome.sourceUID { source["uid"] = uid }
            object["plan"] =
                [
                    "caseId": plan.caseId, "lineage": plan.lineage.description, "source": source,
                    "target": ["account": plan.target.description, "uid": outcome.targetUID.map { $0 as Any } ?? NSNull()] as JSONObject,
                    "lineageVersion": plan.lineageVersion, "targetAuthentication": plan.targetAuthentication,
                    "ownershipEvidence": plan.ownershipEvidence, "reason": plan.reason,
                ] as JSONObject
        }
        if let digest = outcome.planDigest { object["planDigest"] = digest.hex }
        if let staff = outcome.requestedBy { object["requestedBy"] = staff }
        if outcome.plan != nil { object["approvedBy"] = outcome.approvedBy ?? NSNull() }
        if outcome.step == "dry-run" || outcome.step == "apply" {
            var changes = outcome.effects.map { describe($0, outcome: outcome) }
            changes.append(
                "grant nothing: the target account has no entitlement until it runs Restore Purchases and a verified store transaction arrives")
            object[outcome.step == "dry-run" ? "wouldChange" : "changed"] = outcome.accepted || outcome.step == "dry-run" ? changes : []
        }
        switch outcome.step {
        case "propose" where outcome.accepted:
            object["note"] =
                "proposed, not applied: the roster changes when another administrator co-signs it with: ledger support cosign --change \(outcome.changeDigest?.hex ?? "DIGEST") --admin ID --admin-key FILE"
        case "review-change":
            object["note"] =
                "review: nothing was appended. Co-sign with: ledger support cosign --change \(outcome.changeDigest?.hex ?? "DIGEST") --admin ID --admin-key FILE"
        case "dry-run":
            object["note"] =
                "dry run: nothing was appended."
                + (outcome.accepted
                    ? " Apply with: ledger support transfer --case \(outcome.caseId ?? "ID") --apply --staff ID --key FILE"
                    : outcome.plan != nil && outcome.approvedBy == nil
                        ? " An approver who reviewed this plan approves it with: ledger support approve --case \(outcome.caseId ?? "ID") --plan-digest \(outcome.planDigest?.hex ?? "HEX") --approver ID --key FILE"
                        : "")
        case "apply" where outcome.accepted:
            object["note"] =
                "Transfer applied. No entitlement was granted: ask the customer to run Restore Purchases while signed in to the target account."
        default:
            break
        }
        return object
    }

    static func describe(_ event: LedgerEvent, outcome: SupportOutcome) -> String {
        switch event {
        case .entitlementEnded(let lineage, let account, _):
            return "end the live entitlement of the previous account \(account)\(outcome.sourceUID.map { " (\($0))" } ?? "") on lineage \(lineage)"
        case .transferApplied(let e):
            let from =
                switch e.source {
                case .bound(let account): "account \(account)\(outcome.sourceUID.map { " (\($0))" } ?? "")"
                case .tombstoned(let account): "the deletion tombstone of \(account)"
                }
            return
                "rebind lineage \(e.lineage) from \(from) to account \(e.target)\(outcome.targetUID.map { " (\($0))" } ?? ""); append transfer-applied"
        default:
            return event.name
        }
    }

    static func render(_ record: AuditRecord) -> JSONObject {
        let entry = record.entry
        var object: JSONObject = [
            "seq": entry.sequence, "time": LedgerTime.format(entry.time), "kind": entry.kind, "reason": entry.reason,
        ]
        if let lineage = entry.lineage { object["lineage"] = lineage.description }
        if let account = entry.account { object["account"] = account.description }
        if let staff = entry.staff { object["staff"] = staff }
        if let caseId = entry.caseId { object["caseId"] = caseId }
        if let signer = record.signer { object["signedBy"] = signer }
        if let signature = record.signature { object["signature"] = signature }
        if let coSigner = record.coSigner { object["coSignedBy"] = coSigner }
        if let coSignature = record.coSignature { object["coSignature"] = coSignature }
        if let digest = record.changeDigest { object["changeDigest"] = digest.hex }
        return object
    }
}

extension DemoScript {
    /// Scenario 7 of the demonstration: the deleted account's subscription moved to carol2 by the
    /// support runbook (keys held in memory for the demo only).
    func supportRecoveryAfterDeletion(originalTransactionId c: String, at t: Int64) throws {
        console.out("7. Support recovery after the deletion (docs/support-recovery.md)")
        let root = try Ed25519PrivateKey.generate()
        let ann = try Ed25519PrivateKey.generate()
        let olivia = try Ed25519PrivateKey.generate()
        let adam = try Ed25519PrivateKey.generate()
        try ledger.enrollFirstAdministrator("root", publicKey: root.publicKey, at: t)
        _ = try ledger.enrollStaff(
            "ann", roles: .administrator, publicKey: ann.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: root, at: t)
        for (staff, key, roles) in [("olivia", olivia, StaffRoles.operator_), ("adam", adam, StaffRoles.approver)] {
            let proposal = try ledger.enrollStaff(
                staff, roles: roles, publicKey: key.publicKey, ownAccountUID: nil, administrator: "root", administratorKey: root, at: t)
            _ = try ledger.coSignRosterChange(digest: proposal.changeDigest ?? .zero, administrator: "ann", key: ann, at: t)
        }
        console.out(
            "  roster: root (administrator, set like `ledger init --admin`), ann (second administrator), olivia (operator) and adam (approver), each proposed by root and co-signed by ann"
        )
        func show(_ title: String, _ outcome: SupportOutcome) {
            let result = outcome.accepted ? "done" : "refused (\(outcome.refusalReason ?? ""))"
            console.out("  \(title.padding(toLength: 58, withPad: " ", startingAt: 0)) → \(result)")
        }
        let input = TransferRequestInput(
            caseId: "DEMO-1", reason: "customer deleted the account and signed up again; identity confirmed by support",
            originalTransactionId: c,
            targetUID: "carol2", targetAuthentication: "firebase re-auth + email OTP",
            ownershipEvidence: "Apple order lookup in App Store Connect, reference in ticket 4711")
        let request = try ledger.requestTransfer(input, operator: "olivia", key: olivia, at: t)
        show("olivia (operator) requests the transfer to carol2", request)
        console.out("      plan digest \(request.planDigest?.hex ?? "-"), source \(request.plan.map { "\($0.source)" } ?? "-")")
        let digest = request.planDigest ?? .zero
        show(
            "olivia tries to approve her own request",
            try ledger.approveTransfer(caseId: "DEMO-1", approver: "olivia", key: olivia, planDigest: digest, at: t))
        show(
            "adam (approver) approves the plan digest he reviewed",
            try ledger.approveTransfer(caseId: "DEMO-1", approver: "adam", key: adam, planDigest: digest, at: t))
        let review = try ledger.reviewTransfer(caseId: "DEMO-1")
        show("dry run: \(review.checks.filter(\.passed).count)/\(review.checks.count) safeguards hold, nothing appended", review)
        show("olivia applies the transfer", try ledger.applyTransfer(caseId: "DEMO-1", staff: "olivia", key: olivia, at: t + 60_000))
        try query("carol2", at: t + 60_000)
        step(
            "carol2 runs Restore Purchases",
            [
                "type": "restore", "account": "carol2", "transaction": transaction(c, "2000000000000202", at: t + 120_000),
                "at": t + 120_000,
            ])
        try query("carol2", at: t + 120_000)
    }
}
