using PersistentServices.Diagnostics;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Tool.Tests.TestSupport;
using Spectre.Console;

namespace PersistentServices.Tool.Tests;

/// <summary>
/// Progress on long work (issue 55): psctl verify and replay-check report their steps through <see cref="IProgressDisplay"/>,
/// what they print is the same with a display as without one, and the console display shows nothing for work that ends
/// within its delay and nothing at all where the console is redirected or not interactive.
/// </summary>
public sealed class ProgressDisplayTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    /// <summary>Runs the work on the caller's thread and keeps the steps it was given, to look at them afterwards.</summary>
    private sealed class RecordingDisplay : IProgressDisplay
    {
        public List<IReadOnlyList<WorkProgress>> Runs { get; } = [];

        public T Run<T>(IReadOnlyList<WorkProgress> steps, Func<T> work)
        {
            Runs.Add(steps);
            return work();
        }
    }

    /// <summary>Runs the work on a thread of its own and samples the last step every 50 ms while it runs, as a display would.</summary>
    private sealed class SamplingDisplay(List<(long Done, long Total)> seen) : IProgressDisplay
    {
        public IReadOnlyList<WorkProgress> Steps { get; private set; } = [];

        public T Run<T>(IReadOnlyList<WorkProgress> steps, Func<T> work)
        {
            Steps = steps;
            var running = Task.Run(work);
            while (!running.Wait(50))
            {
                lock (seen)
                {
                    seen.Add((steps[^1].Done, steps[^1].Total));
                }
            }

            return running.GetAwaiter().GetResult();
        }
    }

    /// <summary>Several pages and two segments (16 KiB pages, 64 KiB segments), committed in many commits.</summary>
    private static async Task WriteLogAsync(string directory)
    {
        var options = new LogOptions { Directory = directory, PageSizeBits = 14, MemorySizeBits = 16, SegmentSizeBits = 16, MaxRecordBytes = 4096 };
        await using var log = await DurableLog.OpenAsync(options, cancellationToken: Ct);
        for (uint i = 0; i < 300; i++)
        {
            await log.WaitUntilDurableAsync(log.Append(RecordKind.Payload, new Payload { Tag = i, Data = Google.Protobuf.ByteString.CopyFrom(new byte[300]) }), Ct);
        }
    }

    private static (int Exit, string Output, string Error) Psctl(IProgressDisplay? display, params string[] args)
    {
        var output = new StringWriter();
        var error = new StringWriter();
        var exit = Cli.Run(args, output, error, progress: display);
        return (exit, output.ToString(), error.ToString());
    }

    private static (IAnsiConsole Console, StringWriter Written) InteractiveConsole(bool interactive = true)
    {
        var written = new StringWriter();
        var console = AnsiConsole.Create(new AnsiConsoleSettings
        {
            Ansi = AnsiSupport.Yes,
            ColorSystem = ColorSystemSupport.NoColors,
            Interactive = interactive ? InteractionSupport.Yes : InteractionSupport.No,
            Out = new AnsiConsoleOutput(written),
        });
        return (console, written);
    }

    [Fact]
    public async Task Verify_ReportsBothWalks_ReadingTheWholeLog_AndPrintsTheSameReport()
    {
        using var dir = new TempDirectory();
        var log = dir.Combine("log");
        await WriteLogAsync(log);
        var segmentBytes = Directory.GetFiles(log, "log.*").Sum(f => new FileInfo(f).Length);
        Assert.True(Directory.GetFiles(log, "log.*").Length >= 2, "the log should span two segments");

        var display = new RecordingDisplay();
        var withDisplay = Psctl(display, "verify", log);
        var without = Psctl(null, "verify", log);

        Assert.Equal(Cli.Clean, withDisplay.Exit);
        Assert.Equal(without.Output, withDisplay.Output);
        Assert.Equal(without.Error, withDisplay.Error);
        var steps = Assert.Single(display.Runs);
        Assert.Equal(["checking the log's entries", "counting the committed records"], steps.Select(s => s.Description));
        foreach (var step in steps)
        {
            Assert.True(step.Finished, step.Description);
            Assert.True(step.Total > 0 && step.Total <= segmentBytes, $"{step.Description}: total {step.Total} of {segmentBytes} segment bytes");
            // Each walk reads every page it crosses: at least the bytes it was to read (a page before the begin address, a
            // page read again, add to them), so a bar reaches its end when the walk does.
            Assert.True(step.Done >= step.Total, $"{step.Description}: read {step.Done} of {step.Total}");
        }
    }

    [Fact]
    public async Task ReplayCheck_ReportsTheCopyByBytes_AndTheServiceRun_AndPrintsTheSameReport()
    {
        using var dir = new TempDirectory();
        var log = dir.Combine("log");
        await WriteLogAsync(log);
        var segmentBytes = Directory.GetFiles(log, "log.*").Sum(f => new FileInfo(f).Length);
        var script = dir.Combine("service.sh");
        await File.WriteAllTextAsync(script, """
            cat > "$PERSISTENTSERVICES_REPLAY_CHECK/report.json" <<'EOF'
            {"formatVersion": 1, "result": "passed", "text": "every session replayed fine\n"}
            EOF
            """, Ct);

        var display = new RecordingDisplay();
        var withDisplay = Psctl(display, "replay-check", "--log", log, "--", "sh", script);
        var without = Psctl(null, "replay-check", "--log", log, "--", "sh", script);

        Assert.True(withDisplay.Exit == Cli.Clean, withDisplay.Output + withDisplay.Error);
        Assert.Equal(without.Output, withDisplay.Output);
        Assert.Equal(without.Error, withDisplay.Error);
        Assert.Equal(2, display.Runs.Count);
        var copy = Assert.Single(display.Runs[0]);
        Assert.Equal("copying the log into the sandbox", copy.Description);
        Assert.Equal(segmentBytes, copy.Total);
        Assert.Equal(segmentBytes, copy.Done);
        Assert.True(copy.Finished);
        var service = Assert.Single(display.Runs[1]);
        Assert.Equal("sessions", service.Unit);
        Assert.Equal(0, service.Total); // a service that writes no progress.json (an older library): the step spins
        Assert.True(service.Finished);
    }

    [Fact]
    public async Task ReplayCheck_ReadsTheServicesProgressFile_WhileItRunsAndAfterItExits()
    {
        using var dir = new TempDirectory();
        var log = dir.Combine("log");
        await WriteLogAsync(log);
        var script = dir.Combine("service.sh");
        await File.WriteAllTextAsync(script, """
            printf '{"sessions":5,"replayed":2}' > "$PERSISTENTSERVICES_REPLAY_CHECK/progress.json"
            sleep 1
            printf '{"sessions":5,"replayed":5}' > "$PERSISTENTSERVICES_REPLAY_CHECK/progress.json"
            cat > "$PERSISTENTSERVICES_REPLAY_CHECK/report.json" <<'EOF'
            {"formatVersion": 1, "result": "passed", "text": "every session replayed fine\n"}
            EOF
            """, Ct);
        var seen = new List<(long Done, long Total)>();
        var display = new SamplingDisplay(seen);

        var (exit, output, error) = Psctl(display, "replay-check", "--log", log, "--", "sh", script);

        Assert.True(exit == Cli.Clean, output + error);
        Assert.Contains((2L, 5L), seen); // read while the service ran
        var service = display.Steps[^1];
        Assert.Equal((5L, 5L), (service.Done, service.Total)); // and once it exited
        Assert.True(service.Finished);
    }

    [Fact]
    public void Sandbox_Progress_RoundTrips_AndAMissingOrDamagedFileReadsAsNothing()
    {
        using var dir = new TempDirectory();
        Directory.CreateDirectory(dir.Combine("log"));
        File.WriteAllText(Path.Combine(dir.Combine("log"), "commit.meta"), "");
        var sandbox = ReplayCheckSandbox.Create(dir.Combine("log"), showSessionIds: false, dir.Path);
        try
        {
            Assert.False(sandbox.TryReadProgress(out _, out _));
            sandbox.WriteProgress(3, 7);
            Assert.True(sandbox.TryReadProgress(out var replayed, out var sessions));
            Assert.Equal((3, 7), (replayed, sessions));
            sandbox.WriteProgress(7, 7);
            Assert.True(sandbox.TryReadProgress(out replayed, out sessions));
            Assert.Equal((7, 7), (replayed, sessions));
            Assert.False(File.Exists(sandbox.ProgressPath + ".tmp"));

            File.WriteAllText(sandbox.ProgressPath, "{\"sessions\":");
            Assert.False(sandbox.TryReadProgress(out _, out _));
        }
        finally
        {
            sandbox.Delete();
        }
    }

    [Fact]
    public async Task ReplayCheck_Verbose_ShowsNoProgress_ItsServiceLinesGoToStandardError()
    {
        using var dir = new TempDirectory();
        await WriteLogAsync(dir.Combine("log"));
        var display = new RecordingDisplay();
        var (exit, _, error) = Psctl(display, "replay-check", "--log", dir.Combine("log"), "--verbose", "--", "sh", "-c", "echo from the service");
        Assert.Equal(Cli.CannotCheck, exit);
        Assert.Contains("from the service", error, StringComparison.Ordinal);
        Assert.Empty(display.Runs);
    }

    [Fact]
    public async Task Sandbox_CopiedWithProgress_IsTheSameCopy()
    {
        using var dir = new TempDirectory();
        var log = dir.Combine("log");
        await WriteLogAsync(log);
        var progress = new WorkProgress("copying");
        var counted = ReplayCheckSandbox.Create(log, showSessionIds: false, dir.Path, progress: progress);
        var plain = ReplayCheckSandbox.Create(log, showSessionIds: false, dir.Path);
        try
        {
            var files = Directory.GetFiles(plain.LogDirectory).Select(Path.GetFileName).Order(StringComparer.Ordinal).ToList();
            Assert.Equal(files, Directory.GetFiles(counted.LogDirectory).Select(Path.GetFileName).Order(StringComparer.Ordinal));
            Assert.Contains("log.1", files);
            foreach (var file in files)
            {
                var source = await File.ReadAllBytesAsync(Path.Combine(log, file!), Ct);
                Assert.Equal(source, await File.ReadAllBytesAsync(Path.Combine(counted.LogDirectory, file!), Ct));
                Assert.Equal(source, await File.ReadAllBytesAsync(Path.Combine(plain.LogDirectory, file!), Ct));
            }
        }
        finally
        {
            counted.Delete();
            plain.Delete();
        }
    }

    [Fact]
    public void ConsoleDisplay_WorkWithinTheDelay_ShowsNothing()
    {
        var (console, written) = InteractiveConsole();
        var display = new ConsoleProgressDisplay(console, TimeSpan.FromSeconds(5));
        var step = new WorkProgress("a short step");

        var result = display.Run([step], () => 42);

        Assert.Equal(42, result);
        Assert.Equal("", written.ToString());
    }

    [Fact]
    public void ConsoleDisplay_WorkPastTheDelay_ShowsItsSteps_AndReturnsWhatTheWorkReturns()
    {
        var (console, written) = InteractiveConsole();
        var display = new ConsoleProgressDisplay(console, TimeSpan.FromMilliseconds(50));
        var bytes = new WorkProgress("reading [the] log") { Total = 1000 };
        var spinning = new WorkProgress("waiting for the service");

        var result = display.Run([bytes, spinning], () =>
        {
            for (var i = 0; i < 10; i++)
            {
                bytes.Add(100);
                Thread.Sleep(60);
            }

            bytes.Finish();
            Thread.Sleep(300);
            spinning.Finish();
            return "done";
        });

        Assert.Equal("done", result);
        var shown = written.ToString();
        Assert.Contains("reading [the] log", shown, StringComparison.Ordinal); // markup escaped, shown as given
        Assert.Contains("waiting for the service", shown, StringComparison.Ordinal);
        Assert.Contains("%", shown, StringComparison.Ordinal);
    }

    [Fact]
    public void ConsoleDisplay_CountsInTheStepsUnit_BytesInMebibytes()
    {
        var (console, written) = InteractiveConsole();
        var display = new ConsoleProgressDisplay(console, TimeSpan.FromMilliseconds(20));
        var sessions = new WorkProgress("replaying", "sessions");
        var bytes = new WorkProgress("copying") { Total = 8 << 20 };

        display.Run([bytes, sessions], () =>
        {
            bytes.Add(4 << 20);
            sessions.Report(2, 5);
            Thread.Sleep(400);
            return 0;
        });

        var shown = written.ToString();
        Assert.Contains("2/5 sessions", shown, StringComparison.Ordinal);
        Assert.Contains("4/8 MiB", shown, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public void ConsoleDisplay_WorkThatThrows_ThrowsTheSameException(bool pastTheDelay)
    {
        var (console, _) = InteractiveConsole();
        var display = new ConsoleProgressDisplay(console, TimeSpan.FromMilliseconds(pastTheDelay ? 20 : 5000));

        var thrown = Assert.Throws<IOException>(() => display.Run<int>([new WorkProgress("failing")], () =>
        {
            Thread.Sleep(pastTheDelay ? 200 : 0);
            throw new IOException("the disk went away");
        }));

        Assert.Equal("the disk went away", thrown.Message);
    }

    [Fact]
    public void ConsoleDisplay_RedirectedOrNotInteractive_IsNone()
    {
        var (interactive, _) = InteractiveConsole();
        var (plain, _) = InteractiveConsole(interactive: false);

        Assert.Same(NoProgressDisplay.Instance, ConsoleProgressDisplay.For(redirected: true, interactive));
        Assert.Same(NoProgressDisplay.Instance, ConsoleProgressDisplay.For(redirected: false, plain));
        Assert.IsType<ConsoleProgressDisplay>(ConsoleProgressDisplay.For(redirected: false, interactive));
    }
}
