using System.Diagnostics;
using System.Globalization;
using System.Text.Json;
using PersistentServices.Diagnostics;
using PersistentServices.Recovery;

namespace PersistentServices.Tool;

/// <summary>
/// <c>psctl replay-check</c>: copies a service's log into a temporary sandbox, runs the service build given after
/// <c>--</c> as a child process in the replay check mode (the environment variable
/// <see cref="ReplayCheckSandbox.EnvironmentVariable"/> names the sandbox), waits for its report and prints it. The log
/// directory is only read; the service recovers the copy, binds no port and stops after the check.
/// </summary>
internal static class ReplayCheckCommand
{
    public const string Usage = """
          psctl replay-check --log <log-directory> [options] -- <command> [arguments...]

        replay-check tells which sessions of a log would diverge if a given build of the service recovered it (before a
        rolling upgrade, or in CI on a copy of a production log). It copies the log directory into a temporary sandbox,
        starts <command> (the service build, e.g. 'dotnet ./publish/Orders.dll') with PERSISTENTSERVICES_REPLAY_CHECK
        naming the sandbox, so that the service recovers the copy (sessions one at a time, in log order), binds no port,
        serves nothing, writes a report and stops. The log directory is only read. Sessions are named by their trace tag.

          --log <dir>            the log directory, or a copy of it (required)
          --report <file>        also write the report as JSON to <file>
          --timeout <seconds>    give up (and stop the service) after this long; default 600
          --show-session-ids     name sessions by id as well (ids of anonymous sessions are bearer secrets)
          --show-bodies          print a diverging request's body and the replayed reply's (they may hold clients' secrets)
          --work-dir <dir>       create the sandbox under <dir> (default: the temporary directory); it needs room for a copy of the log
          --keep-sandbox         keep the sandbox (the copy, the report, the service's output) and print its path
          --verbose              pass the service's output through to stderr

        Exit status: 0 every session replayed fine (or nothing to replay); 1 a session diverged, or recovery of the copy failed;
                     2 the check could not run (usage, the log could not be copied or opened, no report from the service).
        """;

    private const int DefaultTimeoutSeconds = 600;
    private const int OutputLinesOnFailure = 40;
    private static readonly TimeSpan ProgressPoll = TimeSpan.FromMilliseconds(250);

    /// <summary>Runs the check; <paramref name="progress"/> shows the copy and the service's run while they take long (not with <c>--verbose</c>, whose lines go to standard error).</summary>
    public static int Run(string[] args, TextWriter output, TextWriter error, IProgressDisplay? progress = null)
    {
        string? log = null;
        string? reportFile = null;
        string? workDir = null;
        var timeout = TimeSpan.FromSeconds(DefaultTimeoutSeconds);
        var showIds = false;
        var showBodies = false;
        var keep = false;
        var verbose = false;
        string[]? command = null;
        for (var i = 0; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--" when i + 1 < args.Length:
                    command = args[(i + 1)..];
                    i = args.Length;
                    break;
                case "--log" when i + 1 < args.Length:
                    log = args[++i];
                    break;
                case "--report" when i + 1 < args.Length:
                    reportFile = args[++i];
                    break;
                case "--work-dir" when i + 1 < args.Length:
                    workDir = args[++i];
                    break;
                case "--timeout" when i + 1 < args.Length && int.TryParse(args[i + 1], NumberStyles.None, CultureInfo.InvariantCulture, out var seconds) && seconds > 0:
                    timeout = TimeSpan.FromSeconds(seconds);
                    i++;
                    break;
                case "--show-session-ids":
                    showIds = true;
                    break;
                case "--show-bodies":
                    showBodies = true;
                    break;
                case "--keep-sandbox":
                    keep = true;
                    break;
                case "--verbose":
                    verbose = true;
                    break;
                default:
                    error.WriteLine($"psctl replay-check: unexpected argument '{LogKeyArguments.Shown(args[i])}'.");
                    error.WriteLine(Usage);
                    return Cli.CannotCheck;
            }
        }

        if (log is null || command is null)
        {
            error.WriteLine(log is null
                ? "psctl replay-check: give the log directory with --log."
                : "psctl replay-check: give the service's command after '--' (for example: -- dotnet ./publish/Orders.dll).");
            error.WriteLine(Usage);
            return Cli.CannotCheck;
        }

        progress = verbose || progress is null ? NoProgressDisplay.Instance : progress;
        ReplayCheckSandbox sandbox;
        try
        {
            var copying = new WorkProgress("copying the log into the sandbox");
            sandbox = progress.Run([copying], () => ReplayCheckSandbox.Create(log, showIds, workDir, showBodies, copying));
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ArgumentException)
        {
            error.WriteLine($"psctl replay-check: the log could not be copied: {ex.Message}");
            return Cli.CannotCheck;
        }

        try
        {
            return RunService(sandbox, command, timeout, reportFile, verbose, progress, output, error);
        }
        finally
        {
            if (keep)
            {
                output.WriteLine($"Sandbox kept: {sandbox.Path} (log/: the copy the service recovered; report.json; service.log: its output)");
            }
            else
            {
                sandbox.Delete();
            }
        }
    }

    private static int RunService(
        ReplayCheckSandbox sandbox, string[] command, TimeSpan timeout, string? reportFile, bool verbose, IProgressDisplay progress, TextWriter output, TextWriter error)
    {
        var start = new ProcessStartInfo(command[0])
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
        };
        foreach (var argument in command.AsSpan(1))
        {
            start.ArgumentList.Add(argument);
        }

        start.Environment[ReplayCheckSandbox.EnvironmentVariable] = sandbox.Path;

        // Belt and braces: a service built with this library binds no port in the check mode; should it bind one anyway,
        // let it be a free port on the loopback interface, never the one the real service uses.
        start.Environment["ASPNETCORE_URLS"] = "http://127.0.0.1:0";
        start.Environment["DOTNET_NOLOGO"] = "1";

        var serviceLog = Path.Combine(sandbox.Path, "service.log");
        var tail = new Queue<string>();
        using var writer = new StreamWriter(serviceLog);
        void Capture(string? line)
        {
            if (line is null)
            {
                return;
            }

            lock (tail)
            {
                writer.WriteLine(line);
                tail.Enqueue(line);
                if (tail.Count > OutputLinesOnFailure)
                {
                    tail.Dequeue();
                }

                if (verbose)
                {
                    error.WriteLine(line);
                }
            }
        }

        output.WriteLine($"Checking {sandbox.Source} with: {string.Join(' ', command)}");
        using var process = new Process { StartInfo = start };
        process.OutputDataReceived += (_, e) => Capture(e.Data);
        process.ErrorDataReceived += (_, e) => Capture(e.Data);
        try
        {
            process.Start();
        }
        catch (Exception ex) when (ex is System.ComponentModel.Win32Exception or InvalidOperationException)
        {
            error.WriteLine($"psctl replay-check: could not start '{command[0]}': {ex.Message}");
            return Cli.CannotCheck;
        }

        process.StandardInput.Close();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        ConsoleCancelEventHandler cancel = (_, _) => Stop(process);
        Console.CancelKeyPress += cancel;
        try
        {
            // How far the service's replay has come: the sessions it has replayed, from the sandbox's progress.json (a
            // service built with an older library writes none: the step spins, with its time).
            var replaying = new WorkProgress("the service replays sessions", "sessions");
            var exited = progress.Run([replaying], () =>
            {
                var ended = WaitReporting(process, timeout, sandbox, replaying);
                replaying.Finish();
                return ended;
            });
            if (!exited)
            {
                Stop(process);
                process.WaitForExit();
                error.WriteLine($"psctl replay-check: the service did not finish the check within {timeout.TotalSeconds:0} s and was stopped (--timeout). Its last output:");
                WriteTail(tail, error);
                return Cli.CannotCheck;
            }

            process.WaitForExit(); // the output is read to its end
        }
        finally
        {
            Console.CancelKeyPress -= cancel;
        }

        lock (tail)
        {
            writer.Flush();
        }

        if (!File.Exists(sandbox.ReportPath))
        {
            error.WriteLine(
                $"psctl replay-check: the service exited with code {process.ExitCode} without a report. Was it built with a PersistentServices version that has the " +
                "replay check, does it call AddPersistentServices, and did it start? Its last output:");
            WriteTail(tail, error);
            return Cli.CannotCheck;
        }

        var exit = PrintReport(sandbox.ReportPath, output, error);
        if (reportFile is not null)
        {
            File.Copy(sandbox.ReportPath, reportFile, overwrite: true);
        }

        if (exit == Cli.CannotCheck)
        {
            WriteTail(tail, error);
        }

        return exit;
    }

    /// <summary>Waits for the service to exit (false after <paramref name="timeout"/>), reading its progress meanwhile and once it ended.</summary>
    private static bool WaitReporting(Process process, TimeSpan timeout, ReplayCheckSandbox sandbox, WorkProgress replaying)
    {
        var waited = Stopwatch.StartNew();
        bool ended;
        while (true)
        {
            var left = timeout - waited.Elapsed;
            if (left <= TimeSpan.Zero)
            {
                ended = false;
                break;
            }

            if (process.WaitForExit(left < ProgressPoll ? left : ProgressPoll))
            {
                ended = true;
                break;
            }

            ReadProgress(sandbox, replaying);
        }

        ReadProgress(sandbox, replaying);
        return ended;
    }

    private static void ReadProgress(ReplayCheckSandbox sandbox, WorkProgress replaying)
    {
        if (sandbox.TryReadProgress(out var replayed, out var sessions) && sessions > 0)
        {
            replaying.Report(replayed, sessions);
        }
    }

    /// <summary>Prints the report's text; the exit status follows its result.</summary>
    internal static int PrintReport(string reportPath, TextWriter output, TextWriter error)
    {
        try
        {
            using var json = JsonDocument.Parse(File.ReadAllBytes(reportPath));
            var root = json.RootElement;
            if (root.TryGetProperty("text", out var text))
            {
                output.Write(text.GetString());
            }

            var version = root.GetProperty("formatVersion").GetInt32();
            if (version > ReplayCheckSandbox.FormatVersion)
            {
                error.WriteLine($"psctl replay-check: the report has format {version}, newer than this psctl knows ({ReplayCheckSandbox.FormatVersion}): use a psctl of the library's version.");
                return Cli.CannotCheck;
            }

            return root.GetProperty("result").GetString() switch
            {
                "passed" => Cli.Clean,
                "diverged" or "failed" => Cli.Refused,
                _ => Cli.CannotCheck,
            };
        }
        catch (Exception ex) when (ex is JsonException or KeyNotFoundException or InvalidOperationException or IOException)
        {
            error.WriteLine($"psctl replay-check: the report {reportPath} could not be read: {ex.Message}");
            return Cli.CannotCheck;
        }
    }

    private static void Stop(Process process)
    {
        try
        {
            process.Kill(entireProcessTree: true);
        }
        catch (InvalidOperationException)
        {
            // It exited meanwhile.
        }
    }

    private static void WriteTail(Queue<string> tail, TextWriter error)
    {
        lock (tail)
        {
            foreach (var line in tail)
            {
                error.WriteLine("  | " + line);
            }
        }
    }
}
