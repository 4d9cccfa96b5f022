using PersistentServices.Checkpoints;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// Issue 32, finding 6: the log directory was created 0755 and its files 0644, readable by every local user (and the log
/// holds requests' bodies and headers). Now the directory is 0700 and every file 0600 unless LogOptions.FileMode widens
/// it; a directory made by an older build is narrowed when the log opens.
/// </summary>
[System.Runtime.Versioning.UnsupportedOSPlatform("windows")]
public sealed class LogFileModeTests
{
    private const UnixFileMode OwnerOnly = UnixFileMode.UserRead | UnixFileMode.UserWrite;
    private const UnixFileMode OwnerOnlyDirectory = OwnerOnly | UnixFileMode.UserExecute;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task NewLog_DirectoryIs0700_EveryFileIs0600()
    {
        using var dir = new TempDirectory();
        var logDirectory = Path.Combine(dir.Path, "log");
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(logDirectory), cancellationToken: Ct))
        {
            var lsn = log.Append(RecordKind.Payload, new Payload { Tag = 1 });
            await log.WaitUntilDurableAsync(lsn, Ct);
            AnchorFile.Write(logDirectory, lsn, log.FileMode);
        }

        Assert.Equal(OwnerOnlyDirectory, File.GetUnixFileMode(logDirectory));
        var files = Directory.GetFiles(logDirectory);
        Assert.Contains(files, f => Path.GetFileName(f) == "anchor");
        Assert.Contains(files, f => Path.GetFileName(f).StartsWith("log.", StringComparison.Ordinal));
        Assert.All(files, f => Assert.True(File.GetUnixFileMode(f) == OwnerOnly, $"{Path.GetFileName(f)} is {File.GetUnixFileMode(f)}"));
    }

    [Fact]
    public async Task LogOfAnOlderBuild_WorldReadable_IsNarrowedWhenItOpens_OrWidenedToTheGroupWhenConfigured()
    {
        using var dir = new TempDirectory();
        var logDirectory = Path.Combine(dir.Path, "log");
        await using (var log = await DurableLog.OpenAsync(LogTestOptions.Small(logDirectory), cancellationToken: Ct))
        {
            await log.WaitUntilDurableAsync(log.Append(RecordKind.Payload, new Payload { Tag = 1 }), Ct);
        }

        const UnixFileMode worldReadable = OwnerOnly | UnixFileMode.GroupRead | UnixFileMode.OtherRead;
        File.SetUnixFileMode(logDirectory, worldReadable | UnixFileMode.UserExecute | UnixFileMode.GroupExecute | UnixFileMode.OtherExecute);
        foreach (var file in Directory.GetFiles(logDirectory))
        {
            File.SetUnixFileMode(file, worldReadable);
        }

        await using (await DurableLog.OpenAsync(LogTestOptions.Small(logDirectory), cancellationToken: Ct))
        {
            Assert.Equal(OwnerOnlyDirectory, File.GetUnixFileMode(logDirectory));
            Assert.All(Directory.GetFiles(logDirectory), f => Assert.Equal(OwnerOnly, File.GetUnixFileMode(f)));
        }

        var groupReadable = LogTestOptions.Small(logDirectory);
        groupReadable.FileMode = OwnerOnly | UnixFileMode.GroupRead;
        await using (await DurableLog.OpenAsync(groupReadable, cancellationToken: Ct))
        {
            Assert.Equal(OwnerOnlyDirectory | UnixFileMode.GroupRead | UnixFileMode.GroupExecute, File.GetUnixFileMode(logDirectory));
            Assert.All(Directory.GetFiles(logDirectory), f => Assert.Equal(OwnerOnly | UnixFileMode.GroupRead, File.GetUnixFileMode(f)));
        }
    }

    [Fact]
    public void FileMode_WithoutTheOwnersReadAndWrite_OrWithExecuteBits_IsRefused()
    {
        var options = LogTestOptions.Small("/tmp/unused");
        options.FileMode = UnixFileMode.UserRead;
        Assert.Contains("FileMode", Assert.Throws<ArgumentException>(options.Validate).Message, StringComparison.Ordinal);
        options.FileMode = OwnerOnly | UnixFileMode.UserExecute;
        Assert.Throws<ArgumentException>(options.Validate);
    }
}
