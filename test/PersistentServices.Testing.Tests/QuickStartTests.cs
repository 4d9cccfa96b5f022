using System.Diagnostics;
using System.Net;
using System.Text.RegularExpressions;

namespace PersistentServices.Testing.Tests;

/// <summary>
/// The README's quick start runs as pasted: its code blocks are the files of samples/QuickStart (which this project
/// builds), and its transcript, run by bash with curl against that build, prints what the README shows.
/// </summary>
public sealed partial class QuickStartTests
{
    private static string QuickStartDll => typeof(QuickStart.Controllers.CartController).Assembly.Location;

    [Theory]
    [InlineData("samples/QuickStart/Program.cs")]
    [InlineData("samples/QuickStart/Controllers/CartController.cs")]
    [InlineData("samples/QuickStart/QuickStart.csproj")]
    public void Readme_QuotesTheSampleFile_Verbatim(string file)
    {
        var readme = Repository.Read("README.md");
        var content = Repository.Read(file);
        if (file.EndsWith(".csproj", StringComparison.Ordinal))
        {
            // The README shows a user's project: a package reference where the sample has the project reference.
            Assert.Contains("dotnet add package PersistentServices.AspNetCore", readme, StringComparison.Ordinal);
            Assert.Contains("<ProjectReference Include=\"../../src/PersistentServices.AspNetCore/PersistentServices.AspNetCore.csproj\" />", content, StringComparison.Ordinal);
            return;
        }

        Assert.Contains("```csharp\n" + content + "```\n", readme, StringComparison.Ordinal);
    }

    [Fact]
    public async Task ReadmeTranscript_RunByBash_PrintsWhatTheReadmeShows()
    {
        var (commands, expected) = ParseTranscript(Repository.Read("README.md"));
        Assert.Contains(commands, c => c.StartsWith("kill -9", StringComparison.Ordinal));

        // The README's user built the project in its folder: bin/Debug/net10.0 is where this test's build put QuickStart.
        using var folder = new TempFolder();
        var bin = Path.Combine(folder.Path, "bin", "Debug");
        Directory.CreateDirectory(bin);
        File.CreateSymbolicLink(Path.Combine(bin, "net10.0"), Path.GetDirectoryName(QuickStartDll)!);
        var port = FreePort();
        var script = string.Join('\n', commands.Where(c => !c.StartsWith("dotnet build", StringComparison.Ordinal)))
            .Replace("127.0.0.1:5000", $"127.0.0.1:{port}", StringComparison.Ordinal);
        // Whatever happens, the services the script started in the background do not outlive it.
        script = "set -e\ntrap 'kill -9 $(jobs -p) 2>/dev/null || true' EXIT\n" + script + "\n";

        var start = new ProcessStartInfo("bash", ["-c", script])
        {
            WorkingDirectory = folder.Path,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        using var bash = Process.Start(start)!;
        var stdout = bash.StandardOutput.ReadToEndAsync(TestContext.Current.CancellationToken);
        var stderr = bash.StandardError.ReadToEndAsync(TestContext.Current.CancellationToken);
        using (var timeout = CancellationTokenSource.CreateLinkedTokenSource(TestContext.Current.CancellationToken))
        {
            timeout.CancelAfter(TimeSpan.FromSeconds(120));   // the transcript's `until curl` loops wait for a service that may never come
            try
            {
                await bash.WaitForExitAsync(timeout.Token);
            }
            catch (OperationCanceledException) when (!TestContext.Current.CancellationToken.IsCancellationRequested)
            {
                bash.Kill(entireProcessTree: true);
                Assert.Fail($"the transcript did not finish within 120 s:\n{await stdout}");
            }
        }

        var appLog = File.Exists(Path.Combine(folder.Path, "app.log")) ? await File.ReadAllTextAsync(Path.Combine(folder.Path, "app.log"), TestContext.Current.CancellationToken) : "";
        Assert.True(bash.ExitCode == 0, $"bash exited with {bash.ExitCode}:\n{await stderr}\n{await stdout}\n{appLog}");

        Assert.Equal(Normalize(expected), Normalize((await stdout).Replace("\r", "", StringComparison.Ordinal)));
        Assert.True(Directory.Exists(Path.Combine(folder.Path, "data", "log")), "the log is not in ./data/log");
    }

    /// <summary>The ```console block after "### The protocol through a crash": lines "$ cmd" and the output after each.</summary>
    private static (List<string> Commands, string Expected) ParseTranscript(string readme)
    {
        var at = readme.IndexOf("### The protocol through a crash", StringComparison.Ordinal);
        Assert.True(at >= 0, "README.md has no '### The protocol through a crash' section");
        var open = readme.IndexOf("```console\n", at, StringComparison.Ordinal) + "```console\n".Length;
        var close = readme.IndexOf("```\n", open, StringComparison.Ordinal);
        var commands = new List<string>();
        var expected = new List<string>();
        foreach (var line in readme[open..close].Split('\n', StringSplitOptions.RemoveEmptyEntries))
        {
            if (line.StartsWith("$ ", StringComparison.Ordinal))
            {
                commands.Add(line[2..]);
            }
            else
            {
                expected.Add(line);
            }
        }

        return (commands, string.Join('\n', expected));
    }

    /// <summary>Session ids and dates differ from run to run.</summary>
    private static string Normalize(string text)
    {
        var lines = text.Split('\n', StringSplitOptions.RemoveEmptyEntries)
            .Select(l => l.StartsWith("Date: ", StringComparison.Ordinal) ? "Date: <date>" : l)
            .Select(l => SessionId().Replace(l, "PS-Session: <id>"));
        return string.Join('\n', lines);
    }

    [GeneratedRegex("PS-Session: [A-Za-z0-9_-]{22}")]
    private static partial Regex SessionId();

    private static int FreePort()
    {
        using var listener = new System.Net.Sockets.TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}

internal sealed class TempFolder : IDisposable
{
    public string Path { get; } = Directory.CreateTempSubdirectory("ps-testing-tests-").FullName;

    public void Dispose()
    {
        try
        {
            Directory.Delete(Path, recursive: true);
        }
        catch (IOException)
        {
        }
    }
}
