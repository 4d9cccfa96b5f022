namespace PersistentServices.Log;

/// <summary>One reason not to open a log: what is wrong, where (log address, segment file and offset when known).</summary>
internal sealed record LogProblem(string Message, long Address, string? File = null, long FileOffset = -1)
{
    /// <summary>What an operator should do, appended to the message of a refused open.</summary>
    public static string WhatToDo(string directory) =>
        "The log was not opened and nothing on disk was changed. " +
        $"Run 'psctl verify {directory}' to list every problem, then restore the log directory from a backup or replica (docs/operations.md).";

    /// <summary>The exception a refused open throws for this problem (the first one found).</summary>
    public LogCorruptionException ToException(string directory, int others)
    {
        var more = others switch
        {
            0 => "",
            1 => " One more problem was found.",
            _ => $" {others} more problems were found.",
        };
        return new LogCorruptionException($"{Message}.{more} {WhatToDo(directory)}", Address, File, FileOffset);
    }
}
