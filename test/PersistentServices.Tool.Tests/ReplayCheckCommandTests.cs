using System.Diagnostics;
using System.Security.Cryptography;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Tool.Tests.TestSupport;

namespace PersistentServices.Tool.Tests;

/// <summary>
/// <c>psctl replay-check</c>'s own contract: arguments, the sandbox (a copy; the source is only read), the child process
/// (it is told the sandbox, its report decides the exit status, its output is shown when it fails, it is stopped at the
/// timeout). The service side, a real service build recovering a real log, is tested in
/// test/PersistentServices.ProcessTests/ReplayCheckTests.cs.
/// </summary>
public sealed class ReplayCheckCommandTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static (int Exit, string Output) Run(params string[] args)
    {
        var output = new StringWriter();
        var exit = Cli.Run(["replay-check", .. args], output, output);
        return (exit, output.ToString());
    }

    private static async Task WriteLogAsync(string directory)
    {
        var options = new LogOptions { Directory = directory, PageSizeBits = 14, MemorySizeBits = 16, SegmentSizeBits = 16, MaxRecordBytes = 4096 };
        await using var log = await DurableLog.OpenAsync(options, cancellationToken: Ct);
        for (uint i = 0; i < 40; i++)
        {
            await log.WaitUntilDurableAsync(log.Append(RecordKind.Payload, new Payload { Tag = i, Data = Google.Protobuf.ByteString.CopyFrom(new byte[300]) }), Ct);
        }
    }

    private static string Fingerprint(string directory) => string.Join('\n', Directory.GetFiles(directory).Order(StringComparer.Ordinal).Select(f =>
        $"{Path.GetFileName(f)} {new FileInfo(f).Length} {File.GetLastWriteTimeUtc(f):O} {Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(f)))}"));

    /// <summary>A stand-in service: a shell script that checks what psctl gave it and writes <paramref name="report"/> as its report.</summary>
    private static string FakeService(TempDirectory dir, string report)
    {
        var script = dir.Combine("service.sh");
        File.WriteAllText(script, $$"""
            sandbox="$PERSISTENTSERVICES_REPLAY_CHECK"
            test -f "$sandbox/sandbox.json" || { echo "no sandbox.json in '$sandbox'"; exit 9; }
            test -f "$sandbox/log/log.0" && test -f "$sandbox/log/commit.meta" || { echo "no log copy"; exit 9; }
            test ! -e "$sandbox/log/directory.lock" || { echo "the lock file was copied"; exit 9; }
            echo "urls: $ASPNETCORE_URLS"
            cat > "$sandbox/report.json" <<'EOF'
            {{report}}
            EOF
            """);
        return script;
    }

    [Fact]
    public void ReplayCheck_NoLogOrNoCommand_ExitsTwoWithUsage()
    {
        var (noLog, output) = Run("--", "true");
        Assert.Equal(Cli.CannotCheck, noLog);
        Assert.Contains("give the log directory with --log", output, StringComparison.Ordinal);

        var (noCommand, output2) = Run("--log", "/tmp");
        Assert.Equal(Cli.CannotCheck, noCommand);
        Assert.Contains("give the service's command after '--'", output2, StringComparison.Ordinal);
    }

    [Fact]
    public void ReplayCheck_NotALogDirectory_ExitsTwo_StartsNothing()
    {
        using var dir = new TempDirectory();
        var (exit, output) = Run("--log", dir.Path, "--work-dir", dir.Path, "--", "sh", "-c", "touch started");
        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains("is not a PersistentServices log directory", output, StringComparison.Ordinal);
        Assert.Empty(Directory.GetFileSystemEntries(dir.Path));
    }

    [Theory]
    [InlineData("passed", Cli.Clean)]
    [InlineData("diverged", Cli.Refused)]
    [InlineData("failed", Cli.Refused)]
    [InlineData("notChecked", Cli.CannotCheck)]
    public async Task ReplayCheck_TheServiceGetsASandboxWithTheCopy_ItsReportDecidesTheExitStatus(string result, int expected)
    {
        using var dir = new TempDirectory();
        var log = dir.Combine("log");
        await WriteLogAsync(log);
        var before = Fingerprint(log);
        var work = Directory.CreateDirectory(dir.Combine("work")).FullName;
        var script = FakeService(dir, $$"""{"formatVersion": 1, "result": "{{result}}", "text": "the report's text: {{result}}\n"}""");

        var (exit, output) = Run("--log", log, "--work-dir", work, "--report", dir.Combine("report.json"), "--", "sh", script);

        Assert.True(expected == exit, output);
        Assert.Contains($"the report's text: {result}", output, StringComparison.Ordinal);
        Assert.Contains(result, await File.ReadAllTextAsync(dir.Combine("report.json"), Ct), StringComparison.Ordinal);
        Assert.Empty(Directory.GetFileSystemEntries(work)); // the sandbox is deleted
        Assert.Equal(before, Fingerprint(log));
    }

    [Fact]
    public async Task ReplayCheck_ServiceExitsWithoutAReport_ExitsTwo_AndShowsItsLastOutput()
    {
        using var dir = new TempDirectory();
        await WriteLogAsync(dir.Combine("log"));
        var (exit, output) = Run("--log", dir.Combine("log"), "--", "sh", "-c", "echo 'Unhandled exception: no such endpoint' >&2; exit 134");
        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains("exited with code 134 without a report", output, StringComparison.Ordinal);
        Assert.Contains("  | Unhandled exception: no such endpoint", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task ReplayCheck_KeepSandbox_KeepsTheCopyTheReportAndTheServiceOutput()
    {
        using var dir = new TempDirectory();
        await WriteLogAsync(dir.Combine("log"));
        var work = Directory.CreateDirectory(dir.Combine("work")).FullName;
        var script = FakeService(dir, """{"formatVersion": 1, "result": "passed", "text": "fine\n"}""");

        var (exit, output) = Run("--log", dir.Combine("log"), "--work-dir", work, "--keep-sandbox", "--", "sh", script);

        Assert.True(exit == Cli.Clean, output);
        var sandbox = Assert.Single(Directory.GetDirectories(work));
        Assert.Contains($"Sandbox kept: {sandbox}", output, StringComparison.Ordinal);
        Assert.True(File.Exists(Path.Combine(sandbox, "report.json")));
        Assert.Contains("urls: http://127.0.0.1:0", await File.ReadAllTextAsync(Path.Combine(sandbox, "service.log"), Ct), StringComparison.Ordinal);
    }

    [Fact]
    public async Task ReplayCheck_ServiceStillRunningAtTheTimeout_IsStopped_ExitsTwo()
    {
        using var dir = new TempDirectory();
        await WriteLogAsync(dir.Combine("log"));
        var pidFile = dir.Combine("pid");
        var watch = Stopwatch.StartNew();

        var (exit, output) = Run("--log", dir.Combine("log"), "--timeout", "2", "--", "sh", "-c", $"echo $$ > {pidFile}; exec sleep 60");

        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains("did not finish the check within 2 s and was stopped", output, StringComparison.Ordinal);
        Assert.True(watch.Elapsed < TimeSpan.FromSeconds(30), $"took {watch.Elapsed}");
        var pid = int.Parse(File.ReadAllText(pidFile).Trim(), System.Globalization.CultureInfo.InvariantCulture);
        Assert.False(Directory.Exists($"/proc/{pid}"), "the service is still running");
    }

    [Fact]
    public async Task Sandbox_Create_CopiesTheLogFilesOnly_TheSourceIsUnchanged_AndOpenRefusesAnyOtherDirectory()
    {
        using var dir = new TempDirectory();
        var log = dir.Combine("log");
        await WriteLogAsync(log);
        await File.WriteAllTextAsync(Path.Combine(log, "notes.txt"), "not part of the log", Ct);
        var before = Fingerprint(log);

        var sandbox = ReplayCheckSandbox.Create(log, showSessionIds: true, dir.Path);
        try
        {
            Assert.Equal(["commit.meta", "log.0"], Directory.GetFiles(sandbox.LogDirectory).Select(Path.GetFileName).Order(StringComparer.Ordinal));
            Assert.Equal(await File.ReadAllBytesAsync(Path.Combine(log, "log.0"), Ct), await File.ReadAllBytesAsync(Path.Combine(sandbox.LogDirectory, "log.0"), Ct));
            Assert.Equal(before, Fingerprint(log));

            var opened = ReplayCheckSandbox.Open(sandbox.Path);
            Assert.Equal(Path.GetFullPath(log), opened.Source);
            Assert.True(opened.ShowSessionIds);

            // The check mode cannot be pointed at a service's real log directory: it is not a sandbox.
            var refused = Assert.Throws<InvalidOperationException>(() => ReplayCheckSandbox.Open(log));
            Assert.Contains("PERSISTENTSERVICES_REPLAY_CHECK", refused.Message, StringComparison.Ordinal);
            Assert.Contains("not a replay check sandbox", refused.Message, StringComparison.Ordinal);
        }
        finally
        {
            sandbox.Delete();
        }

        Assert.False(Directory.Exists(sandbox.Path));
        Assert.Equal(before, Fingerprint(log));
    }
}
