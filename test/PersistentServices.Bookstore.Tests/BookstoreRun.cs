using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Reflection;
using System.Text.RegularExpressions;

namespace PersistentServices.Bookstore.Tests;

/// <summary>One run of the bookstore's one command (<c>dotnet Bookstore.dll --plain …</c>) as a child process, and what it printed.</summary>
internal sealed partial record BookstoreRun(int ExitCode, IReadOnlyList<string> Output, IReadOnlyDictionary<string, long> Result, IReadOnlyList<int> ServicePids)
{
    private static readonly string BookstorePath = typeof(BookstoreRun).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "BookstorePath").Value!;

    public long this[string name] => Result[name];

    /// <summary>Runs <c>dotnet Bookstore.dll [command] --plain arguments…</c> (the one command when <paramref name="command"/> is null).</summary>
    public static async Task<BookstoreRun> RunAsync(IReadOnlyList<string> arguments, TimeSpan timeout, string? command = null)
    {
        var start = new ProcessStartInfo("dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            WorkingDirectory = Path.GetDirectoryName(BookstorePath)!,
        };
        start.ArgumentList.Add(BookstorePath);
        if (command is not null)
        {
            start.ArgumentList.Add(command);
        }

        start.ArgumentList.Add("--plain");
        foreach (var argument in arguments)
        {
            start.ArgumentList.Add(argument);
        }

        start.Environment["DOTNET_NOLOGO"] = "1";
        var output = new ConcurrentQueue<string>();
        using var process = Process.Start(start)!;
        process.OutputDataReceived += (_, e) => Append(output, e.Data);
        process.ErrorDataReceived += (_, e) => Append(output, e.Data);
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();

        var log = TestContext.Current.TestOutputHelper;
        log?.WriteLine($"dotnet {string.Join(' ', start.ArgumentList)}");
        using var cts = CancellationTokenSource.CreateLinkedTokenSource(TestContext.Current.CancellationToken);
        cts.CancelAfter(timeout);
        var timedOut = false;
        try
        {
            await process.WaitForExitAsync(cts.Token);
        }
        catch (OperationCanceledException)
        {
            timedOut = true;
            process.Kill(entireProcessTree: true); // the launcher; its services stop by themselves once it is gone
            await process.WaitForExitAsync(CancellationToken.None);
        }

        process.WaitForExit(); // drain the output handlers
        var lines = output.ToList();
        foreach (var line in lines)
        {
            log?.WriteLine(line);
        }

        Assert.False(timedOut, $"the bookstore did not finish within {timeout.TotalSeconds:0} s");
        var result = lines.LastOrDefault(l => l.StartsWith("RESULT ", StringComparison.Ordinal));
        var values = result is null
            ? new Dictionary<string, long>()
            : ResultField().Matches(result).ToDictionary(m => m.Groups["name"].Value, m => long.Parse(m.Groups["value"].Value, CultureInfo.InvariantCulture));
        var pids = lines.SelectMany(l => PidField().Matches(l)).Select(m => int.Parse(m.Groups["pid"].Value, CultureInfo.InvariantCulture)).Distinct().ToList();
        return new BookstoreRun(process.ExitCode, lines, values, pids);
    }

    /// <summary>The service processes of this run still alive (none should be, once the launcher returned).</summary>
    public IReadOnlyList<int> LiveServices()
        => ServicePids.Where(pid => File.Exists($"/proc/{pid.ToString(CultureInfo.InvariantCulture)}/cmdline")
                                    && File.ReadAllText($"/proc/{pid.ToString(CultureInfo.InvariantCulture)}/cmdline").Contains("Bookstore", StringComparison.Ordinal)).ToList();

    private static void Append(ConcurrentQueue<string> output, string? line)
    {
        if (line is not null)
        {
            output.Enqueue(line);
        }
    }

    [GeneratedRegex(@"(?<name>[a-z_]+)=(?<value>\d+)")]
    private static partial Regex ResultField();

    [GeneratedRegex(@"pid (?<pid>\d+)")]
    private static partial Regex PidField();
}
