using PersistentServices.Log;

namespace PersistentServices.Tool;

/// <summary>
/// The keys of an encrypted log for psctl's commands that read records (docs/operations.md, "Encrypting the log"): each
/// <c>--key-file FILE</c> names a file holding one key in base64 (as the service's configuration holds it; a Kubernetes
/// Secret mounted as a file), and <see cref="EnvironmentVariable"/> may hold keys in base64, comma-separated. A key is never
/// taken from the command line itself, where <c>ps</c> and the shell's history would show it.
/// </summary>
internal sealed class LogKeyArguments
{
    /// <summary>Keys in base64, comma-separated, read with those of <c>--key-file</c>.</summary>
    public const string EnvironmentVariable = "PSCTL_LOG_KEYS";

    public const string Help = $"""
          --key-file <file>      a key of an encrypted log: a file holding it in base64, as the service's configuration does
                                 (repeat for each key the log's records may use: the current one and previous ones);
                                 or {EnvironmentVariable}=<base64>[,<base64>...] in the environment. Never the key itself
                                 on the command line.
        """;

    private readonly List<string> _files = [];

    /// <summary>Takes <c>--key-file FILE</c> at <paramref name="i"/> (advancing it); false when the argument is something else.</summary>
    public bool TryTake(string[] args, ref int i)
    {
        if (args[i] != "--key-file" || i + 1 >= args.Length)
        {
            return false;
        }

        _files.Add(args[++i]);
        return true;
    }

    /// <summary>
    /// The keys given, as read-only keys (null when none): every key is a previous key, since psctl writes nothing.
    /// Throws <see cref="ArgumentException"/> (naming the file or the variable, never a key) when one cannot be used.
    /// </summary>
    public LogEncryptionOptions? Read(Func<string, string?> environment)
    {
        var options = new LogEncryptionOptions();
        for (var n = 0; n < _files.Count; n++)
        {
            var file = _files[n];
            string text;
            try
            {
                text = File.ReadAllText(file).Trim();
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ArgumentException or NotSupportedException)
            {
                // The exception's message names the path: when the path is a key given by mistake, neither is printed.
                throw MayBeKey(file)
                    ? new ArgumentException(
                        $"--key-file {Ordinal(n + 1)} names no file that can be read ({ex.GetType().Name}), and it is not shown here since it looks like a key itself: " +
                        "give the path of a file that holds the key in base64, never the key (the command line shows in 'ps' and in the shell's history)")
                    : new ArgumentException($"the key file '{file}' cannot be read: {ex.Message}", ex);
            }

            Add(options, text, $"the key file '{file}'");
        }

        if (environment(EnvironmentVariable) is { Length: > 0 } keys)
        {
            var i = 0;
            foreach (var key in keys.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries))
            {
                Add(options, key, $"key {++i} of {EnvironmentVariable}");
            }
        }

        return options.PreviousKeys.Count == 0 ? null : options;
    }

    /// <summary>The ids of the keys given (<see cref="LogKey"/>), for messages.</summary>
    public static string Describe(LogEncryptionOptions? keys) => keys is null
        ? "no key was given"
        : "the keys given have the ids " + string.Join(", ", keys.PreviousKeys.Select(k => LogKey.Format(LogKey.IdOf(LogEncryptionOptions.Decode(k, "key")))));

    /// <summary>
    /// Whether an argument that names no readable file may be a key: base64 (or base64url) of at least 16 bytes, which a
    /// file name rarely is. Such an argument is never echoed.
    /// </summary>
    internal static bool MayBeKey(string argument)
    {
        var text = argument.Trim();
        return text.Length >= 22 && text.All(c => char.IsAsciiLetterOrDigit(c) || c is '+' or '/' or '=' or '-' or '_');
    }

    /// <summary>
    /// An argument as psctl's messages may echo it: as given, unless it looks like a key (base64 of 30 bytes or more, as a
    /// 32-byte key's 44 characters are), which is never printed.
    /// </summary>
    public static string Shown(string argument)
        => argument.Trim().Length >= 40 && MayBeKey(argument) ? "(an argument that looks like a key: not shown)" : argument;

    private static string Ordinal(int n) => n switch { 1 => "1st", 2 => "2nd", 3 => "3rd", _ => $"{n}th" };

    private static void Add(LogEncryptionOptions options, string key, string source)
    {
        var id = LogKey.IdOf(LogEncryptionOptions.Decode(key, source));
        if (options.PreviousKeys.All(k => LogKey.IdOf(LogEncryptionOptions.Decode(k, source)) != id))
        {
            options.PreviousKeys.Add(key); // the same key twice (a file and the environment) is taken once
        }
    }
}
