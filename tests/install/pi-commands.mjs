// Prints, one a line, the names of the commands plain pi offers (RPC mode's get_commands) in the current directory:
// pi as installed, with whatever packages its settings name, and the faux model so that nothing reaches a network.
// Env: FAUX (the faux provider extension); `pi` on PATH.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

const pi = spawn("pi", ["-e", process.env.FAUX, "--model", "faux/faux-1", "--mode", "rpc"], { stdio: ["pipe", "pipe", "inherit"] });
// A safety net, not a speed check: a pi that never answers fails the test instead of hanging it.
const timer = setTimeout(() => {
	console.error("pi did not answer get_commands within 120 s");
	pi.kill("SIGKILL");
	process.exit(1);
}, 120_000);
pi.stdin.write(`${JSON.stringify({ id: "commands", type: "get_commands" })}\n`);
for await (const line of createInterface({ input: pi.stdout })) {
	let message;
	try {
		message = JSON.parse(line);
	} catch {
		continue;
	}
	if (message.type !== "response" || message.id !== "commands") continue;
	if (!message.success) {
		console.error(`get_commands failed: ${line}`);
		process.exitCode = 1;
	} else {
		for (const command of message.data.commands) console.log(command.name);
	}
	break;
}
clearTimeout(timer);
pi.stdin.end();
pi.kill();
