using System.Runtime.InteropServices;

namespace PersistentServices.Log;

/// <summary>
/// Makes files and directory entries durable (RELIABILITY.md: write temp, fsync, rename, fsync the directory).
/// </summary>
internal static partial class DurableFile
{
    /// <summary>Files the log creates are readable and writable by the service's user only (0600), unless <see cref="LogOptions.FileMode"/> widens it.</summary>
    public const UnixFileMode OwnerOnly = UnixFileMode.UserRead | UnixFileMode.UserWrite;

    /// <summary>The mode of a directory whose files have <paramref name="fileMode"/>: each class that may read may also enter (0600 → 0700, 0640 → 0750).</summary>
    public static UnixFileMode DirectoryMode(UnixFileMode fileMode)
        => fileMode | UnixFileMode.UserExecute | UnixFileMode.UserWrite |
           (fileMode.HasFlag(UnixFileMode.GroupRead) ? UnixFileMode.GroupExecute : 0) |
           (fileMode.HasFlag(UnixFileMode.OtherRead) ? UnixFileMode.OtherExecute : 0);

    /// <summary>Options that create a file with <paramref name="mode"/> (on Unix; elsewhere the platform's default).</summary>
    public static FileStreamOptions Create(FileMode fileMode, FileAccess access, FileShare share, UnixFileMode mode)
    {
        var options = new FileStreamOptions { Mode = fileMode, Access = access, Share = share };
        if (!OperatingSystem.IsWindows())
        {
            options.UnixCreateMode = mode;
        }

        return options;
    }

    /// <summary>
    /// Gives the log directory and every file in it the configured modes (a log created by an older build, or copied in,
    /// was 0755/0644: readable by every local user). Files only the owner may write stay writable by the owner.
    /// </summary>
    public static void ApplyModes(string directory, UnixFileMode fileMode)
    {
        if (OperatingSystem.IsWindows())
        {
            return;
        }

        File.SetUnixFileMode(directory, DirectoryMode(fileMode));
        foreach (var file in Directory.EnumerateFiles(directory))
        {
            File.SetUnixFileMode(file, fileMode | UnixFileMode.UserWrite | UnixFileMode.UserRead);
        }
    }

    /// <summary>Writes <paramref name="content"/> to <paramref name="path"/> so that after a crash the file is either absent/old or complete.</summary>
    public static void WriteAtomically(string path, ReadOnlySpan<byte> content, UnixFileMode mode = OwnerOnly)
    {
        var temp = path + ".tmp";
        using (var stream = new FileStream(temp, Create(FileMode.Create, FileAccess.Write, FileShare.None, mode)))
        {
            stream.Write(content);
            stream.Flush(flushToDisk: true);
        }

        File.Move(temp, path, overwrite: true);
        FsyncDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
    }

    /// <summary>Creates the directory (and parents) if missing, making the new entries durable; the directory itself with <paramref name="mode"/>.</summary>
    public static void EnsureDirectory(string directory, UnixFileMode? mode = null)
    {
        var full = Path.GetFullPath(directory);
        if (Directory.Exists(full))
        {
            return;
        }

        var parent = Path.GetDirectoryName(full);
        if (parent is not null)
        {
            EnsureDirectory(parent);
        }

        if (mode is { } created && !OperatingSystem.IsWindows())
        {
            Directory.CreateDirectory(full, created);
        }
        else
        {
            Directory.CreateDirectory(full);
        }

        if (parent is not null)
        {
            FsyncDirectory(parent);
        }
    }

    /// <summary>
    /// Shortens a file to <paramref name="length"/>, then extends it with zeros to <paramref name="paddedLength"/> (when
    /// larger), and flushes the change.
    /// </summary>
    public static void Truncate(string path, long length, long paddedLength)
    {
        using var stream = new FileStream(path, FileMode.Open, FileAccess.Write, FileShare.ReadWrite);
        stream.SetLength(length);
        if (paddedLength > length)
        {
            stream.SetLength(paddedLength);
        }

        stream.Flush(flushToDisk: true);
    }

    /// <summary>Deletes a file and makes the removal durable.</summary>
    public static void Delete(string path)
    {
        File.Delete(path);
        FsyncDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
    }

    /// <summary>fsync of a directory, so that created, renamed or deleted entries survive a power loss. No-op on Windows.</summary>
    public static void FsyncDirectory(string directory)
    {
        if (OperatingSystem.IsWindows())
        {
            return;
        }

        var fd = Open(directory, 0 /* O_RDONLY */);
        if (fd < 0)
        {
            throw new IOException($"Cannot open directory '{directory}' to flush it (errno {Marshal.GetLastPInvokeError()}).");
        }

        try
        {
            if (Fsync(fd) != 0)
            {
                throw new IOException($"fsync of directory '{directory}' failed (errno {Marshal.GetLastPInvokeError()}).");
            }
        }
        finally
        {
            _ = Close(fd);
        }
    }

    /// <summary><c>fdatasync</c> of an open file: its data (and the metadata needed to read it) reach the disk.</summary>
    public static void FlushData(Microsoft.Win32.SafeHandles.SafeFileHandle handle)
    {
        if (OperatingSystem.IsWindows())
        {
            RandomAccess.FlushToDisk(handle);
            return;
        }

        var added = false;
        handle.DangerousAddRef(ref added);
        try
        {
            if (Fdatasync((int)handle.DangerousGetHandle()) != 0)
            {
                throw new IOException($"fdatasync failed (errno {Marshal.GetLastPInvokeError()}).");
            }
        }
        finally
        {
            if (added)
            {
                handle.DangerousRelease();
            }
        }
    }

    /// <summary>
    /// Opens (or creates) a log segment for the log's device: on Linux <c>O_DIRECT | O_DSYNC</c> (each write reaches the
    /// disk before it returns, with no copy through the page cache: FASTER's buffers, offsets and lengths are whole
    /// 512-byte sectors); where the file system refuses <c>O_DIRECT</c> (tmpfs, some network file systems),
    /// <c>O_DSYNC</c> alone (as durable, one more copy). Elsewhere a write-through .NET handle.
    /// </summary>
    public static Microsoft.Win32.SafeHandles.SafeFileHandle OpenSegment(string path, bool create) => OpenSegment(path, create, out _);

    /// <summary>Opens a log segment as <see cref="OpenSegment(string, bool)"/> does (a new one readable by its owner only).</summary>
    public static Microsoft.Win32.SafeHandles.SafeFileHandle OpenSegment(string path, bool create, out bool direct) => OpenSegment(path, create, OwnerOnly, out direct);

    /// <summary>Opens a log segment as <see cref="OpenSegment(string, bool)"/> does.</summary>
    /// <param name="path">The segment file.</param>
    /// <param name="create">Create the file when it does not exist.</param>
    /// <param name="direct">Whether the handle writes with <c>O_DIRECT</c> (to the disk, not the page cache).</param>
    /// <param name="mode">The mode a new segment file is created with.</param>
    public static Microsoft.Win32.SafeHandles.SafeFileHandle OpenSegment(string path, bool create, UnixFileMode mode, out bool direct)
    {
        direct = false;
        if (!OperatingSystem.IsLinux())
        {
            if (create && !OperatingSystem.IsWindows() && !File.Exists(path))
            {
                using (new FileStream(path, DurableFile.Create(FileMode.OpenOrCreate, FileAccess.Write, FileShare.ReadWrite, mode)))
                {
                }
            }

            return File.OpenHandle(path, create ? FileMode.OpenOrCreate : FileMode.Open, FileAccess.ReadWrite, FileShare.ReadWrite, FileOptions.WriteThrough);
        }

        const int ReadWrite = 0x2, Create = 0x40, DataSync = 0x1000, CloseOnExec = 0x80000, Einval = 22;
        var directFlag = RuntimeInformation.ProcessArchitecture switch
        {
            Architecture.X64 or Architecture.X86 => 0x4000,
            Architecture.Arm64 or Architecture.Arm => 0x10000,
            _ => 0,
        };
        var flags = ReadWrite | DataSync | CloseOnExec | (create ? Create : 0);
        var fd = directFlag == 0 ? -1 : OpenMode(path, flags | directFlag, (int)mode /* less the umask */);
        direct = fd >= 0;
        if (fd < 0 && (directFlag == 0 || Marshal.GetLastPInvokeError() == Einval))
        {
            fd = OpenMode(path, flags, (int)mode);
        }

        if (fd < 0)
        {
            var errno = Marshal.GetLastPInvokeError();
            throw errno == 2 /* ENOENT */
                ? new FileNotFoundException($"Log segment '{path}' does not exist.", path)
                : new IOException($"Cannot open log segment '{path}' (errno {errno}).", errno);
        }

        return new Microsoft.Win32.SafeHandles.SafeFileHandle(fd, ownsHandle: true);
    }

    [LibraryImport("libc", EntryPoint = "open", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int OpenMode(string path, int flags, int mode);

    [LibraryImport("libc", EntryPoint = "fdatasync", SetLastError = true)]
    private static partial int Fdatasync(int fd);

    [LibraryImport("libc", EntryPoint = "open", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int Open(string path, int flags);

    [LibraryImport("libc", EntryPoint = "fsync", SetLastError = true)]
    private static partial int Fsync(int fd);

    [LibraryImport("libc", EntryPoint = "close", SetLastError = true)]
    private static partial int Close(int fd);
}
