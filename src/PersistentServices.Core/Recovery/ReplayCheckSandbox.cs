using System.Globalization;
using System.Text.Json;
using PersistentServices.Checkpoints;
using PersistentServices.Log;

namespace PersistentServices.Recovery;

/// <summary>
/// Where a replay check runs (docs/operations.md, "Replay check before an upgrade"): a new temporary directory holding a
/// copy of a service's log (<c>log/</c>), a description of the check (<c>sandbox.json</c>) and, once the check ran, its
/// report (<c>report.json</c>). The service build under check recovers, and may write, the copy only. The directory the
/// log is copied from is only read: no lock taken, no file created, nothing truncated.
/// <para>
/// <c>psctl replay-check</c> creates the sandbox and names it to the service in
/// <see cref="EnvironmentVariable"/>; <c>ReplayCheck.RunAsync</c> creates one in process. A directory without a valid
/// <c>sandbox.json</c> is refused, so the check mode cannot be pointed at a service's real log directory.
/// </para>
/// </summary>
internal sealed class ReplayCheckSandbox
{
    /// <summary>The environment variable that puts a service into the replay check mode: the sandbox's path.</summary>
    public const string EnvironmentVariable = "PERSISTENTSERVICES_REPLAY_CHECK";

    public const string DescriptionFileName = "sandbox.json";
    public const string ReportFileName = "report.json";

    /// <summary>How far the service's replay has come, rewritten while it runs, for psctl's progress display.</summary>
    public const string ProgressFileName = "progress.json";
    public const string LogDirectoryName = "log";

    /// <summary>Version of <c>sandbox.json</c> and <c>report.json</c>; a reader refuses newer ones.</summary>
    public const int FormatVersion = 1;

    private ReplayCheckSandbox(string path, string source, bool showSessionIds, bool showBodies)
    {
        Path = path;
        Source = source;
        ShowSessionIds = showSessionIds;
        ShowBodies = showBodies;
    }

    /// <summary>The sandbox directory.</summary>
    public string Path { get; }

    /// <summary>The copy of the log the check recovers.</summary>
    public string LogDirectory => System.IO.Path.Combine(Path, LogDirectoryName);

    public string ReportPath => System.IO.Path.Combine(Path, ReportFileName);

    public string ProgressPath => System.IO.Path.Combine(Path, ProgressFileName);

    /// <summary>The directory the log was copied from (only named in the report).</summary>
    public string Source { get; }

    /// <summary>The report names sessions by their id as well as their trace tag (the operator owns the copy and asked).</summary>
    public bool ShowSessionIds { get; }

    /// <summary>The report shows a diverging request's body and the replayed reply's (they may hold clients' secrets: only when asked).</summary>
    public bool ShowBodies { get; }

    /// <summary>
    /// Creates a sandbox under <paramref name="parent"/> (the system's temporary directory by default) and copies the log
    /// in <paramref name="source"/> into it: <c>commit.meta</c> first, then <c>anchor</c>, then the segment files in
    /// increasing order, the order docs/operations.md gives for a copy of a running service's log. <paramref name="progress"/>
    /// (optional) counts the segment bytes copied against their sizes, for a progress display (psctl replay-check).
    /// </summary>
    /// <exception cref="IOException">The source is not a log directory, or a file could not be read.</exception>
    public static ReplayCheckSandbox Create(
        string source, bool showSessionIds, string? parent = null, bool showBodies = false, Diagnostics.WorkProgress? progress = null)
    {
        var from = System.IO.Path.GetFullPath(source);
        if (!Directory.Exists(from))
        {
            throw new DirectoryNotFoundException($"The log directory '{from}' does not exist.");
        }

        var segments = SegmentFiles.List(from);
        var metadata = System.IO.Path.Combine(from, CommitMetadataFile.FileName);
        if (segments.Count == 0 && !File.Exists(metadata))
        {
            throw new IOException($"'{from}' is not a PersistentServices log directory: it holds neither {CommitMetadataFile.FileName} nor a log.N segment file.");
        }

        if (progress is not null)
        {
            progress.Total = segments.Values.Sum();
        }

        var root = parent is null
            ? Directory.CreateTempSubdirectory("ps-replay-check-").FullName
            : Directory.CreateDirectory(System.IO.Path.Combine(parent, "ps-replay-check-" + System.IO.Path.GetRandomFileName())).FullName;
        var sandbox = new ReplayCheckSandbox(root, from, showSessionIds, showBodies);
        try
        {
            Directory.CreateDirectory(sandbox.LogDirectory);
            CopyIfPresent(metadata, sandbox.LogDirectory);
            CopyIfPresent(AnchorFile.PathIn(from), sandbox.LogDirectory);
            foreach (var segment in segments.Keys)
            {
                var path = SegmentFiles.PathOf(SegmentFiles.BasePath(from), segment);
                if (!File.Exists(path))
                {
                    throw new IOException(
                        $"Segment file '{path}' disappeared while the log was copied (the service truncated its log meanwhile): take the copy again.");
                }

                CopySegment(path, System.IO.Path.Combine(sandbox.LogDirectory, System.IO.Path.GetFileName(path)), progress);
            }

            progress?.Finish();

            DurableFile.WriteAtomically(System.IO.Path.Combine(root, DescriptionFileName), sandbox.Describe());
            return sandbox;
        }
        catch
        {
            sandbox.Delete();
            throw;
        }
    }

    /// <summary>Opens a sandbox <see cref="Create"/> made; refuses any other directory.</summary>
    /// <exception cref="InvalidOperationException"><paramref name="path"/> is not a replay check sandbox.</exception>
    public static ReplayCheckSandbox Open(string path)
    {
        var root = System.IO.Path.GetFullPath(path);
        var description = System.IO.Path.Combine(root, DescriptionFileName);
        try
        {
            using var json = JsonDocument.Parse(File.ReadAllBytes(description));
            var element = json.RootElement;
            var version = element.GetProperty("formatVersion").GetInt32();
            if (version > FormatVersion)
            {
                throw new InvalidOperationException(
                    $"The replay check sandbox '{root}' was made by a newer psctl (format {version}; this build knows {FormatVersion}): use a psctl of the same version as the library.");
            }

            var sandbox = new ReplayCheckSandbox(root, element.GetProperty("source").GetString() ?? "", element.GetProperty("showSessionIds").GetBoolean(),
                element.TryGetProperty("showBodies", out var bodies) && bodies.GetBoolean());
            if (!Directory.Exists(sandbox.LogDirectory))
            {
                throw new InvalidOperationException($"The replay check sandbox '{root}' holds no '{LogDirectoryName}' directory.");
            }

            return sandbox;
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or JsonException or KeyNotFoundException)
        {
            throw new InvalidOperationException(
                $"{EnvironmentVariable} is set to '{root}', which is not a replay check sandbox ({DescriptionFileName} missing or unreadable: {ex.Message}). " +
                "The replay check mode is started by 'psctl replay-check' or ReplayCheck.RunAsync, which copy the log into a sandbox; unset the variable to run the service.",
                ex);
        }
    }

    /// <summary>
    /// Records how many of the check's sessions have finished their replay (fine or diverged), replacing the file
    /// whole (written beside it, then renamed over it), so that a reader never sees half of it. Not made durable: it
    /// only feeds a progress display, and a failed write is left for the next one.
    /// </summary>
    public void WriteProgress(int replayed, int sessions)
    {
        var temporary = ProgressPath + ".tmp";
        try
        {
            File.WriteAllText(temporary, string.Create(CultureInfo.InvariantCulture, $"{{\"sessions\":{sessions},\"replayed\":{replayed}}}"));
            File.Move(temporary, ProgressPath, overwrite: true);
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException)
        {
            // The next write tries again; the check does not depend on it.
        }
    }

    /// <summary>What <see cref="WriteProgress"/> recorded last; false while there is nothing (yet) or it cannot be read.</summary>
    public bool TryReadProgress(out int replayed, out int sessions)
    {
        replayed = sessions = 0;
        try
        {
            using var json = JsonDocument.Parse(File.ReadAllBytes(ProgressPath));
            sessions = json.RootElement.GetProperty("sessions").GetInt32();
            replayed = json.RootElement.GetProperty("replayed").GetInt32();
            return sessions >= 0 && replayed >= 0;
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or JsonException or KeyNotFoundException or InvalidOperationException or FormatException)
        {
            return false;
        }
    }

    /// <summary>Deletes the sandbox (never the source).</summary>
    public void Delete()
    {
        try
        {
            Directory.Delete(Path, recursive: true);
        }
        catch (Exception ex) when (ex is IOException or UnauthorizedAccessException)
        {
            // A temporary directory left behind is harmless.
        }
    }

    private byte[] Describe()
    {
        using var buffer = new MemoryStream();
        using (var writer = new Utf8JsonWriter(buffer, new JsonWriterOptions { Indented = true }))
        {
            writer.WriteStartObject();
            writer.WriteNumber("formatVersion", FormatVersion);
            writer.WriteString("source", Source);
            writer.WriteBoolean("showSessionIds", ShowSessionIds);
            writer.WriteBoolean("showBodies", ShowBodies);
            writer.WriteEndObject();
        }

        return buffer.ToArray();
    }

    /// <summary>
    /// Copies a segment file: with <see cref="File.Copy(string, string)"/>, or, for a progress display, a mebibyte at a
    /// time (a segment is a gibibyte by default: per file, a young log's copy would show nothing until its end).
    /// </summary>
    private static void CopySegment(string from, string to, Diagnostics.WorkProgress? progress)
    {
        if (progress is null)
        {
            File.Copy(from, to);
            return;
        }

        using var input = new FileStream(from, FileMode.Open, FileAccess.Read, FileShare.ReadWrite | FileShare.Delete, bufferSize: 0);
        using var output = new FileStream(to, FileMode.CreateNew, FileAccess.Write, FileShare.None, bufferSize: 0);
        var buffer = new byte[1 << 20];
        int n;
        while ((n = input.Read(buffer)) > 0)
        {
            output.Write(buffer.AsSpan(0, n));
            progress.Add(n);
        }
    }

    private static void CopyIfPresent(string file, string directory)
    {
        if (File.Exists(file))
        {
            File.Copy(file, System.IO.Path.Combine(directory, System.IO.Path.GetFileName(file)));
        }
    }
}
