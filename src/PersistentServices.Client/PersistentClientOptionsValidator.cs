using Microsoft.Extensions.Options;

namespace PersistentServices.Client;

/// <summary>Validates each named client's <see cref="PersistentClientOptions"/> at startup.</summary>
internal sealed class PersistentClientOptionsValidator : IValidateOptions<PersistentClientOptions>
{
    public ValidateOptionsResult Validate(string? name, PersistentClientOptions options)
    {
        var failures = options.Validate().ToList();
        return failures.Count == 0 ? ValidateOptionsResult.Success : ValidateOptionsResult.Fail(failures.Select(f => $"{f} (client '{name}')"));
    }
}
