/** Finding the pi-sessiond executable. */

import { accessSync, constants, statSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";
import { SessiondBinaryNotFoundError } from "./errors.js";

/** The name looked up on PATH when neither an explicit binary nor `PI_SESSIOND_BIN` is given. */
export const DEFAULT_BINARY = "pi-sessiond";

/** The environment variable that names the binary when the caller does not. */
export const BINARY_ENV_VAR = "PI_SESSIOND_BIN";

/**
 * The npm package that carries the binary for this platform (`pi-sessiond-linux-x64`, …): an optional dependency
 * of this package, of which npm installs only the one whose `os` and `cpu` match, as esbuild and Biome do.
 */
export const PLATFORM_PACKAGE = `pi-sessiond-${process.platform}-${process.arch}`;

/**
 * The binary the platform package installed beside this one, or undefined when there is none (a platform without
 * a package, an install with `--omit=optional`, or a clone of the repository).
 */
export function packagedBinary(): string | undefined {
	let manifest: string;
	try {
		manifest = createRequire(import.meta.url).resolve(`${PLATFORM_PACKAGE}/package.json`);
	} catch {
		return undefined;
	}
	const path = join(dirname(manifest), "bin", process.platform === "win32" ? "pi-sessiond.exe" : "pi-sessiond");
	return checkExecutable(path) === undefined ? path : undefined;
}

/**
 * The absolute path of the pi-sessiond executable: `binary` if given, else `$PI_SESSIOND_BIN`, else the binary of
 * this platform's package (`packaged`, found by default as npm installed it), else `pi-sessiond` on PATH. A value
 * containing a path separator is a path (relative to the current directory); a bare name is looked up on PATH.
 *
 * The lookup is done here rather than left to `spawn`, whose ENOENT arrives later, asynchronously, and without
 * saying where it looked.
 *
 * @throws SessiondBinaryNotFoundError naming what was tried.
 */
export function resolveBinary(
	binary?: string,
	env: NodeJS.ProcessEnv = process.env,
	packaged: () => string | undefined = packagedBinary,
): string {
	const fromEnv = env[BINARY_ENV_VAR];
	const [wanted, source] =
		binary !== undefined && binary !== ""
			? [binary, "the `binary` option"]
			: fromEnv !== undefined && fromEnv !== ""
				? [fromEnv, `$${BINARY_ENV_VAR}`]
				: [DEFAULT_BINARY, "the default name"];
	const hint =
		`Install it with \`npm install pi-sessiond-client\` (which brings ${PLATFORM_PACKAGE}), ` +
		`\`cargo install --locked pi-sessiond\` or \`pip install pi-sessiond\`, or set ${BINARY_ENV_VAR} to its path.`;

	if (isAbsolute(wanted) || wanted.includes("/") || wanted.includes("\\")) {
		const path = resolve(wanted);
		const problem = checkExecutable(path);
		if (problem) {
			throw new SessiondBinaryNotFoundError(wanted, `pi-sessiond binary ${path} (from ${source}) ${problem}. ${hint}`);
		}
		return path;
	}

	if (wanted === DEFAULT_BINARY) {
		const fromPackage = packaged();
		if (fromPackage !== undefined) return fromPackage;
	}

	const dirs = (env.PATH ?? "").split(delimiter).filter((d) => d !== "");
	const extensions = process.platform === "win32" ? ["", ...(env.PATHEXT ?? ".EXE;.CMD;.BAT").split(";")] : [""];
	for (const dir of dirs) {
		for (const ext of extensions) {
			const candidate = join(dir, wanted + ext);
			if (!checkExecutable(candidate)) return candidate;
		}
	}
	throw new SessiondBinaryNotFoundError(
		wanted,
		`pi-sessiond binary \`${wanted}\` (from ${source}) was not found: no ${PLATFORM_PACKAGE} package installed, ` +
			`nor on PATH (${dirs.length} directories searched). ${hint}`,
	);
}

/** Why `path` cannot be run, or undefined if it can. */
function checkExecutable(path: string): string | undefined {
	try {
		if (!statSync(path).isFile()) return "is not a file";
	} catch {
		return "does not exist";
	}
	try {
		accessSync(path, constants.X_OK);
	} catch {
		return "is not executable";
	}
	return undefined;
}
