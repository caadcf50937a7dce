import Foundation
import LedgerStore
import OwnershipLedger

/// `ledger evidence`: the contract's release evidence (docs/forensics.md).
struct EvidenceCommand: Subcommand {
    static let name = "evidence"
    static let abstract = "Release evidence: the contract's five scenarios from verified signed data, proven offline."
    static let usage = """
        Usage: ledger evidence [--environment E] [--since TIME] --out FILE [--store DIR] [--keys DIR]
               ledger evidence verify FILE --public-key PUB

        Finds in the log, for each scenario the contract requires before release (device-a-device-b,
        same-device-account-switch, deletion-with-active-billing, family-sharing-not-supported,
        support-recovery), the newest instance made only of verified signed Apple data (never
        --trust-decoded facts or legacy receipts) from environment E (default: the ledger's), recorded at
        or after TIME (default: the whole log). Writes FILE: a checkpoint signed now, the instances' records
        with inclusion proofs, each scenario's sequence numbers and explanation, the scenarios missing
        (docs/forensics.md has the format). No UID or Apple transaction id is in it. Prints a summary.
        Exit 0 when every scenario was found; 1 while one is missing (FILE is written anyway), so a
        release gate can run it.
        verify: checks FILE offline with the ledger's signing public key (`ledger signing-key`) and derives
        every scenario again from the proven records. Exit 0 when it verifies and is complete; 1 when it
        does not verify ("verified": false) or a scenario is missing ("complete": false).
        """
    static let options: Set<String> = ["environment", "since", "out", "public-key"]
    static let positionals = 0...2

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        switch arguments.positionals.first {
        case nil: return try export(arguments, console: console)
        case "verify": return try verify(arguments, console: console)
        default: throw CLIError.usage("give no subcommand to export, or verify FILE")
        }
    }

    static func export(_ arguments: Arguments, console: Console) throws -> ExitCode {
        if arguments.value("public-key") != nil { throw CLIError.usage("--public-key belongs to `evidence verify`") }
        let out = try arguments.required("out")
        let since = try arguments.time("since")
        let ledger = try openLedger(arguments)
        let evidence = try ledger.exportEvidence(environment: try arguments.environment(), since: since)
        try writeFile(evidence.data, to: out, sparing: ledger)
        let summary = (try? JSONSerialization.jsonObject(with: evidence.data)) as? [String: Any] ?? [:]
        console.out(
            JSONLine.render([
                "out": out, "complete": evidence.complete, "environment": summary["environment"] ?? NSNull(),
                "since": summary["since"] ?? NSNull(), "checkpointSize": evidence.checkpointSize,
                "records": (summary["records"] as? [Any])?.count ?? 0, "scenarios": summary["scenarios"] ?? [],
                "missing": evidence.missing.map(\.rawValue), "bytes": evidence.data.count,
            ]))
        for scenario in evidence.missing { console.err("missing: \(scenario.rawValue): needs \(scenario.requirement)") }
        return evidence.complete ? .success : .verificationFailed
    }

    static func verify(_ arguments: Arguments, console: Console) throws -> ExitCode {
        guard arguments.positionals.count == 2 else { throw CLIError.usage("give exactly one evidence FILE") }
        for option in ["environment", "since", "out"] where arguments.value(option) != nil {
            throw CLIError.usage("--\(option) belongs to `evidence` (export), not `evidence verify`")
        }
        let data = try readFile(arguments.positionals[1], option: "the evidence file")
        let key = try KeyFiles.publicKey(try arguments.required("public-key"), option: "public-key")
        do {
            let verified = try ReleaseEvidence.verify(data, publicKey: key)
            let found = Dictionary(uniqueKeysWithValues: verified.instances.map { ($0.scenario, $0) })
            console.out(
                JSONLine.render([
                    "verified": true, "complete": verified.complete, "origin": verified.origin, "checkpointSize": verified.checkpointSize,
                    "environment": verified.environment, "since": verified.since.map { LedgerTime.format($0) as Any } ?? NSNull(),
                    "scenarios": ReleaseEvidence.Scenario.allCases.map { scenario -> JSONObject in
                        // Each scenario as the file has it: the verification checked every text.
                        [
                            "scenario": scenario.rawValue, "title": scenario.title, "found": found[scenario] != nil,
                            "seqs": found[scenario]?.sequences ?? [],
                            "explanation": found[scenario]?.explanation
                                ?? ReleaseEvidence.missingExplanation(scenario, environment: verified.environment),
                        ]
                    },
                    "missing": verified.missing.map(\.rawValue),
                ]))
            return verified.complete ? .success : .verificationFailed
        } catch let failure as ReleaseEvidence.Failure {
            console.out(JSONLine.render(["verified": false, "error": failure.message]))
            return .verificationFailed
        }
    }
}
