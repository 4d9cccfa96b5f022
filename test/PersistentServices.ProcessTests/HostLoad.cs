using System.Diagnostics;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Load on the host that a test starts itself (issue 49: production nodes are shared): <c>burners</c> processes that spin a
/// core each and one that writes and fsyncs 64 MiB over and over, all stopped (SIGKILL) when disposed. A test that must
/// hold under load runs with it; nothing here is timed.
/// </summary>
internal sealed class HostLoad : IDisposable
{
    private readonly List<Process> _processes = [];
    private readonly string? _file;

    private HostLoad(string? file) => _file = file;

    /// <summary>Starts <paramref name="burners"/> CPU burners and, when there is any, a disk writer to <paramref name="file"/>.</summary>
    public static HostLoad Start(int burners, string file)
    {
        var load = new HostLoad(burners > 0 ? file : null);
        for (var i = 0; i < burners; i++)
        {
            load.Run("while :; do :; done");
        }

        if (burners > 0)
        {
            load.Run($"while :; do dd if=/dev/zero of='{file}' bs=1M count=64 conv=fsync 2>/dev/null; done");
        }

        return load;
    }

    private void Run(string script)
        => _processes.Add(Process.Start(new ProcessStartInfo("sh", ["-c", script]) { UseShellExecute = false })!);

    public void Dispose()
    {
        foreach (var process in _processes)
        {
            try
            {
                process.Kill(entireProcessTree: true);
                process.WaitForExit();
            }
            catch (InvalidOperationException)
            {
            }

            process.Dispose();
        }

        _processes.Clear();
        if (_file is not null)
        {
            File.Delete(_file);
        }
    }
}
